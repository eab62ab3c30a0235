//! Disk retention for recordings: segments older than their output's
//! `retain_hours` are deleted, and when a disk's free space falls under
//! `[daemon] min_free_bytes` the oldest segments on it go first, before any
//! write can fail. Only files that match a stream's own segment names are
//! ever touched, and each stream's newest segment (possibly being written)
//! is never deleted.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use ::metrics::{counter, gauge};

use super::config::DaemonConfig;
use super::metrics::{SEGMENTS_DELETED, STORAGE_FREE};
use crate::disk::free_bytes;

/// How often the disks are looked at (more often for very short retention,
/// which only tests use).
const CHECK_EVERY: Duration = Duration::from_secs(30);

/// Which files one stream's recordings are, and how long they are kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub stream: String,
    dir: PathBuf,
    /// File name before and after the `{start}` stamp (if the template has
    /// one); the segment index `-NNNNN` and extension follow `after`.
    before: String,
    after: Option<String>,
    ext: String,
    retain: Option<Duration>,
    /// Wall-clock names: the whole strftime path pattern; `dir` is then the
    /// folder above its first time conversion, searched a few levels deep.
    wall_clock: Option<String>,
}

/// Folder levels searched below a wall-clock pattern's fixed root.
const MAX_DEPTH: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Age,
    Space,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Space => "space",
        }
    }
}

impl Target {
    /// The recordings of every stream with a file output.
    pub fn all(config: &DaemonConfig) -> Vec<Target> {
        config.streams.iter().filter_map(|s| Target::new(&s.name, s.output.file.as_deref()?, s.output.retain_hours)).collect()
    }

    /// `template` as in `[streams.output] file`; None when `{start}` is in a
    /// folder name (each run then has its own folder: not managed here).
    pub fn new(stream: &str, template: &str, retain_hours: Option<f64>) -> Option<Target> {
        let retain = retain_hours.map(|h| Duration::from_secs_f64(h * 3600.0));
        let expanded = template.replace("{stream}", stream);
        if crate::clock::has_conversions(&expanded) {
            if expanded.contains("{start}") {
                return None;
            }
            let fixed: PathBuf = Path::new(&expanded).components().take_while(|c| !c.as_os_str().to_string_lossy().contains('%')).collect();
            let dir = if fixed.as_os_str().is_empty() { PathBuf::from(".") } else { fixed };
            let wall_clock = Some(expanded);
            return Some(Target { stream: stream.to_string(), dir, before: String::new(), after: None, ext: String::new(), retain, wall_clock });
        }
        let path = PathBuf::from(expanded);
        let name = path.file_name()?.to_str()?.to_string();
        let dir = path.parent().map(Path::to_path_buf).filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| ".".into());
        if dir.to_str()?.contains("{start}") {
            return None;
        }
        let (stem, ext) = match name.rfind('.') {
            Some(i) if i > 0 => (name[..i].to_string(), name[i..].to_string()),
            _ => (name.clone(), String::new()),
        };
        let (before, after) = match stem.split_once("{start}") {
            Some((b, a)) => (b.to_string(), Some(a.to_string())),
            None => (stem, None),
        };
        Some(Target { stream: stream.to_string(), dir, before, after, ext, retain, wall_clock: None })
    }

    /// Whether `name` is one of this stream's segments: `before`, then
    /// (with a stamp) `20261121T075800Z` + `after`, then `-NNNNN` + `ext`.
    fn owns(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(&self.before) else { return false };
        let rest = match &self.after {
            Some(after) => {
                let stamp_ok = rest.len() >= 16
                    && rest.as_bytes()[..16].iter().enumerate().all(|(i, b)| match i {
                        8 => *b == b'T',
                        15 => *b == b'Z',
                        _ => b.is_ascii_digit(),
                    });
                match rest.get(16..).filter(|_| stamp_ok).and_then(|r| r.strip_prefix(after.as_str())) {
                    Some(r) => r,
                    None => return false,
                }
            }
            None => rest,
        };
        let Some(index) = rest.strip_prefix('-').and_then(|r| r.strip_suffix(self.ext.as_str())) else { return false };
        index.len() == 5 && index.bytes().all(|b| b.is_ascii_digit())
    }

    /// (path, modified, device) of this stream's segments, oldest first.
    fn segments(&self) -> Vec<Segment> {
        let mut found = Vec::new();
        match &self.wall_clock {
            Some(pattern) => walk(&self.dir, MAX_DEPTH, &mut |path| {
                path.to_str().is_some_and(|p| crate::clock::matches(pattern, p.strip_prefix("./").unwrap_or(p)))
            }, &mut found),
            None => {
                let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
                for e in entries.filter_map(Result::ok) {
                    if e.file_name().to_str().is_some_and(|n| self.owns(n)) {
                        found.extend(segment(e.path()));
                    }
                }
            }
        }
        found.sort_by_key(|s| (s.modified, s.path.clone()));
        found
    }
}

fn segment(path: PathBuf) -> Option<Segment> {
    let meta = std::fs::metadata(&path).ok()?;
    Some(Segment { modified: meta.modified().ok()?, device: meta.dev(), path })
}

/// Files under `dir` (at most `depth` folders down) that `keep` accepts.
fn walk(dir: &Path, depth: usize, keep: &mut dyn FnMut(&Path) -> bool, out: &mut Vec<Segment>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => walk(&path, depth - 1, keep, out),
            Ok(t) if t.is_file() && keep(&path) => out.extend(segment(path)),
            _ => {}
        }
    }
}

impl Target {
    /// After deleting `file`: its now empty folders below the fixed root go
    /// too (day folders of wall-clock names).
    fn prune_folders(&self, file: &Path) {
        if self.wall_clock.is_none() {
            return;
        }
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&self.dir) && *d != self.dir) {
            if std::fs::remove_dir(d).is_err() {
                break; // not empty
            }
            dir = d.parent();
        }
    }
}

#[derive(Clone, Debug)]
struct Segment {
    path: PathBuf,
    modified: SystemTime,
    device: u64,
}

/// One pass: what to delete, and why. `free` reads a disk's free bytes
/// (by device), `now` is the clock: both injectable for tests.
fn plan(
    targets: &[Target],
    segments: &[Vec<Segment>],
    now: SystemTime,
    min_free: u64,
    free: &mut dyn FnMut(&Path) -> Option<u64>,
) -> Vec<(usize, PathBuf, Reason)> {
    let mut doomed = Vec::new();
    // Oldest first across streams, per disk, never a stream's newest.
    let mut by_disk: BTreeMap<u64, (PathBuf, Vec<(SystemTime, usize, PathBuf)>)> = BTreeMap::new();
    for (t, (target, segs)) in targets.iter().zip(segments).enumerate() {
        let Some((_newest, older)) = segs.split_last() else { continue };
        for s in older {
            let aged = target.retain.is_some_and(|r| now.duration_since(s.modified).unwrap_or_default() > r);
            if aged {
                doomed.push((t, s.path.clone(), Reason::Age));
            } else {
                by_disk.entry(s.device).or_insert_with(|| (target.dir.clone(), Vec::new())).1.push((s.modified, t, s.path.clone()));
            }
        }
    }
    if min_free == 0 {
        return doomed;
    }
    for (dir, mut candidates) in by_disk.into_values() {
        let Some(available) = free(&dir) else { continue };
        if available >= min_free {
            continue;
        }
        candidates.sort();
        let mut missing = min_free - available;
        for (_, t, path) in candidates {
            if missing == 0 {
                break;
            }
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            missing = missing.saturating_sub(size.max(1));
            doomed.push((t, path, Reason::Space));
        }
    }
    doomed
}

/// The retention thread.
pub struct Retention {
    targets: Arc<Mutex<Vec<Target>>>,
    /// Dropped to stop the thread.
    stop: crossbeam_channel::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Retention {
    pub fn start(targets: Vec<Target>, min_free_bytes: u64) -> Retention {
        let every = targets.iter().filter_map(|t| t.retain).map(|r| r / 4).fold(CHECK_EVERY, Duration::min).max(Duration::from_millis(500));
        let targets = Arc::new(Mutex::new(targets));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let t = targets.clone();
        let thread = std::thread::Builder::new()
            .name("roadseg-retention".into())
            .spawn(move || {
                loop {
                    let current = t.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    sweep(&current, min_free_bytes);
                    if !matches!(stopped.recv_timeout(every), Err(crossbeam_channel::RecvTimeoutError::Timeout)) {
                        return;
                    }
                }
            })
            .ok();
        Retention { targets, stop, thread }
    }

    /// After a reload.
    pub fn set_targets(&self, targets: Vec<Target>) {
        *self.targets.lock().unwrap_or_else(PoisonError::into_inner) = targets;
    }

    pub fn stop(mut self) {
        drop(self.stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sweep(targets: &[Target], min_free: u64) {
    let segments: Vec<Vec<Segment>> = targets.iter().map(Target::segments).collect();
    for target in targets {
        if let Some(free) = free_bytes(&target.dir) {
            gauge!(STORAGE_FREE, "stream" => target.stream.clone()).set(free as f64);
        }
    }
    for (t, path, reason) in plan(targets, &segments, SystemTime::now(), min_free, &mut |d| free_bytes(d)) {
        let stream = &targets[t].stream;
        match std::fs::remove_file(&path) {
            Ok(()) => {
                targets[t].prune_folders(&path);
                tracing::info!(stream = %stream, file = %path.display(), reason = reason.label(), "recording segment deleted");
                counter!(SEGMENTS_DELETED, "stream" => stream.clone(), "reason" => reason.label()).increment(1);
            }
            Err(e) => tracing::warn!(stream = %stream, file = %path.display(), "cannot delete an old recording segment: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(path: &str, age_s: u64, now: SystemTime) -> Segment {
        Segment { path: path.into(), modified: now - Duration::from_secs(age_s), device: 1 }
    }

    #[test]
    fn owns_only_its_own_segments() {
        let t = Target::new("front", "rec/{stream}-{start}.mp4", None).unwrap();
        assert!(t.owns("front-20261121T075800Z-00000.mp4"));
        assert!(t.owns("front-20261121T075800Z-00123.mp4"));
        assert!(!t.owns("front-20261121T075800Z-0001.mp4"));
        assert!(!t.owns("front-2026112XT075800Z-00000.mp4"));
        assert!(!t.owns("frontier-20261121T075800Z-00000.mp4"));
        assert!(!t.owns("front-20261121T075800Z-00000.mkv"));
        assert!(!t.owns("notes.txt"));
        let plain = Target::new("cam", "/var/rec/{stream}.mp4", Some(1.0)).unwrap();
        assert!(plain.owns("cam-00007.mp4") && !plain.owns("cam.mp4"));
        assert_eq!(plain.dir, PathBuf::from("/var/rec"));
        assert!(Target::new("cam", "rec/{start}/{stream}.mp4", None).is_none(), "per-run folders are not managed");
        let clock = Target::new("cam", "rec/{stream}/%Y-%m-%d/%H-%M-%S.mp4", None).unwrap();
        assert_eq!(clock.dir, PathBuf::from("rec/cam"));
    }

    #[test]
    fn wall_clock_segments_are_found_in_their_day_folders_and_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().display().to_string();
        let t = Target::new("cam", &format!("{root}/{{stream}}/%Y-%m-%d/%H-%M-%S.mp4"), Some(1.0)).unwrap();
        let day = tmp.path().join("cam/2026-11-20");
        std::fs::create_dir_all(&day).unwrap();
        for name in ["07-00-00.mp4", "07-05-00.mp4", "notes.txt"] {
            std::fs::write(day.join(name), b"x").unwrap();
        }
        let found: Vec<PathBuf> = t.segments().into_iter().map(|s| s.path).collect();
        assert_eq!(found.len(), 2, "{found:?}");
        std::fs::remove_file(day.join("notes.txt")).unwrap();
        for f in &found {
            std::fs::remove_file(f).unwrap();
            t.prune_folders(f);
        }
        assert!(!day.exists() && tmp.path().join("cam").exists(), "the empty day folder goes, the root stays");
    }

    #[test]
    fn deletes_by_age_then_by_space_oldest_first_never_the_newest() {
        // Rule: segments past retain_hours go; under min_free_bytes the oldest others go until enough is free; a stream's newest segment always stays.
        let now = SystemTime::now();
        let a = Target::new("a", "rec/{stream}.mp4", Some(1.0)).unwrap();
        let b = Target::new("b", "rec/{stream}.mp4", None).unwrap();
        let segs = vec![
            vec![seg("rec/a-00000.mp4", 7200, now), seg("rec/a-00001.mp4", 600, now), seg("rec/a-00002.mp4", 9000, now)],
            vec![seg("rec/b-00000.mp4", 5000, now), seg("rec/b-00001.mp4", 10, now)],
        ];
        let mut segs = segs;
        segs.iter_mut().for_each(|s| s.sort_by_key(|x| x.modified));
        let plenty = plan(&[a.clone(), b.clone()], &segs, now, 100, &mut |_| Some(1_000));
        assert_eq!(plenty, vec![(0, PathBuf::from("rec/a-00002.mp4"), Reason::Age), (0, PathBuf::from("rec/a-00000.mp4"), Reason::Age)]);
        let tight = plan(&[a, b], &segs, now, 100, &mut |_| Some(99));
        assert_eq!(tight.len(), 3, "{tight:?}");
        assert_eq!(tight[2], (1, PathBuf::from("rec/b-00000.mp4"), Reason::Space), "the oldest that age did not take");
        assert!(tight.iter().all(|(_, p, _)| p != Path::new("rec/a-00001.mp4") && p != Path::new("rec/b-00001.mp4")));
    }
}
