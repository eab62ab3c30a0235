//! One repo's folder in the Hub cache, laid out as `huggingface_hub` lays
//! it out, so either tool reuses what the other downloaded:
//!
//! ```text
//! models--org--name/
//!   refs/main                      the commit sha `main` pointed at
//!   blobs/<etag>                   file contents, named by their ETag
//!   snapshots/<sha>/config.json -> ../../blobs/<etag>
//! ```

use std::io;
use std::path::{Path, PathBuf};

use super::HubModelId;
use super::id::is_commit;

pub(super) struct RepoCache {
    root: PathBuf,
}

impl RepoCache {
    pub fn new(cache: &Path, id: &HubModelId) -> RepoCache {
        RepoCache { root: cache.join(id.cache_folder()) }
    }

    /// The commit `revision` is: itself when a sha, else what `refs/` recorded.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let sha = std::fs::read_to_string(self.root.join("refs").join(revision)).ok()?;
        let sha = sha.trim();
        is_commit(sha).then(|| sha.to_string())
    }

    pub fn write_ref(&self, revision: &str, commit: &str) -> io::Result<()> {
        let path = self.root.join("refs").join(revision);
        std::fs::create_dir_all(path.parent().expect("refs/ is a parent"))?;
        if std::fs::read_to_string(&path).is_ok_and(|old| old.trim() == commit) {
            return Ok(());
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&tmp, commit)?;
        std::fs::rename(&tmp, &path)
    }

    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.root.join("snapshots").join(commit)
    }

    /// The snapshot folder when every one of `files` is in it (links
    /// followed: a link to a missing blob is a missing file).
    pub fn complete_snapshot(&self, commit: &str, files: &[&str]) -> Option<PathBuf> {
        let dir = self.snapshot(commit);
        files.iter().all(|f| dir.join(f).is_file()).then_some(dir)
    }

    /// Which of `files` the snapshot lacks, for messages.
    pub fn missing(&self, commit: &str, files: &[&str]) -> Vec<String> {
        files.iter().filter(|f| !self.snapshot(commit).join(f).is_file()).map(|f| f.to_string()).collect()
    }

    pub fn blob(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(etag)
    }

    /// Where a download is written before it is checked: never under its
    /// final name, so a broken or concurrent download is never taken for a
    /// blob.
    pub fn partial_blob(&self, etag: &str) -> io::Result<PathBuf> {
        let blobs = self.root.join("blobs");
        std::fs::create_dir_all(&blobs)?;
        Ok(blobs.join(format!("{etag}.incomplete.{}", std::process::id())))
    }

    /// `snapshots/<commit>/<file>` -> `../../blobs/<etag>`, relative as
    /// `huggingface_hub` makes it, so a cache that is moved still works.
    pub fn link(&self, commit: &str, file: &str, etag: &str) -> io::Result<PathBuf> {
        let dir = self.snapshot(commit);
        std::fs::create_dir_all(&dir)?;
        let pointer = dir.join(file);
        let _ = std::fs::remove_file(&pointer);
        std::os::unix::fs::symlink(Path::new("../../blobs").join(etag), &pointer)?;
        Ok(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_written_as_huggingface_hub_writes_it_is_read_back() {
        // Rule: refs/<rev> names the commit, snapshots/<sha>/<file> links to ../../blobs/<etag>; a dangling link is a missing file.
        let dir = tempfile::tempdir().unwrap();
        let id = HubModelId::parse("org/name@v1").unwrap();
        let cache = RepoCache::new(dir.path(), &id);
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(cache.commit_of("v1"), None);
        cache.write_ref("v1", sha).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("models--org--name/refs/v1")).unwrap(), sha);
        assert_eq!(cache.commit_of("v1").as_deref(), Some(sha));
        assert_eq!(cache.commit_of(sha).as_deref(), Some(sha), "a sha needs no ref");
        cache.link(sha, "config.json", "abc").unwrap();
        assert_eq!(cache.complete_snapshot(sha, &["config.json"]), None, "the blob is not there yet");
        std::fs::create_dir_all(cache.blob("abc").parent().unwrap()).unwrap();
        std::fs::write(cache.blob("abc"), "{}").unwrap();
        let snap = cache.complete_snapshot(sha, &["config.json"]).unwrap();
        assert_eq!(snap, dir.path().join("models--org--name/snapshots").join(sha));
        assert_eq!(std::fs::read_link(snap.join("config.json")).unwrap(), Path::new("../../blobs/abc"));
        assert_eq!(cache.missing(sha, &["config.json", "model.safetensors"]), ["model.safetensors"]);
        cache.write_ref("refs/pr/1", sha).unwrap();
        assert_eq!(cache.commit_of("refs/pr/1").as_deref(), Some(sha));
    }
}
