//! The rules a loaded configuration must satisfy. Every problem is reported
//! (not just the first), each naming its field as `streams[1].output.file`.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::UNIX_EPOCH;

use super::template::{expand_lossy, unknown_placeholder};
use crate::model::MAX_BATCH;
use crate::video::uri::redact_text;
use crate::worker_count::MAX_WORKERS;
use super::{ConfigError, DaemonConfig, OutputConfig, RecordMode, SourceUri, StreamConfig};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the offending key, e.g. `streams[1].output.file`.
    pub field: String,
    pub message: String,
    /// Where the key is written, "FILE, line N" (None: a default, the
    /// environment, or not looked up).
    pub at: Option<String>,
}

impl Problem {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { field: field.into(), message: message.into(), at: None }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at}: ")?;
        }
        // A value quoted in the message may hold credentials (a URI pasted in the wrong field).
        write!(f, "{}: {}", self.field, redact_text(&self.message))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    pub(super) fn into_result(problems: Vec<Problem>) -> Result<(), ConfigError> {
        if problems.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(Problems(problems))) }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} configuration problems:", many.len())?;
                many.iter().try_for_each(|p| write!(f, "\n  - {p}"))
            }
        }
    }
}

#[derive(Default)]
struct Collector(Vec<Problem>);

impl Collector {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::new(field, message));
    }

    fn check(&mut self, ok: bool, field: impl Into<String>, message: impl FnOnce() -> String) {
        if !ok {
            self.add(field, message());
        }
    }
}

pub(super) fn problems(config: &DaemonConfig) -> Vec<Problem> {
    let mut c = Collector::default();
    model(&mut c, config);
    c.check(config.workers.count.in_range(), "workers.count", || {
        format!("{} is outside 1..={MAX_WORKERS} (or auto)", config.workers.count)
    });
    let batch = config.workers.batch;
    c.check((1..=MAX_BATCH).contains(&batch), "workers.batch", || format!("{batch} is outside 1..={MAX_BATCH}"));
    let wait = config.workers.max_batch_wait_ms;
    c.check(wait <= 1000, "workers.max_batch_wait_ms", || format!("{wait} is outside 0..=1000 (milliseconds a live frame may wait for a fuller batch)"));
    listeners(&mut c, config);
    let a = &config.annotate;
    c.check((0.0..=1.0).contains(&a.road_alpha), "annotate.road_alpha", || format!("{} is outside 0..=1", a.road_alpha));
    let timeout = config.daemon.shutdown_timeout_s;
    c.check((1..=600).contains(&timeout), "daemon.shutdown_timeout_s", || format!("{timeout} is outside 1..=600"));
    let m = &config.mqtt;
    if !m.url.is_empty() {
        if let Err(e) = super::parse_mqtt_url(&m.url) {
            c.add("mqtt.url", e.to_string());
        }
        let prefix_ok = !m.topic_prefix.is_empty() && !m.topic_prefix.contains(['+', '#']);
        c.check(prefix_ok, "mqtt.topic_prefix", || format!("'{}' must be non-empty without MQTT wildcards (+, #)", m.topic_prefix));
        c.check(!m.client_id.is_empty(), "mqtt.client_id", || "must not be empty".into());
        c.check(m.username.is_some() == m.password.is_some(), "mqtt.username", || "set both username and password, or neither".into());
        c.check((1..=3600).contains(&m.stats_interval_s), "mqtt.stats_interval_s", || format!("{} is outside 1..=3600", m.stats_interval_s));
        if let Some(t) = m.coverage_threshold {
            c.check((0.0..=1.0).contains(&t), "mqtt.coverage_threshold", || format!("{t} is outside 0..=1 (a share of the scene)"));
        }
    }
    // "I/N" is checked as it is read; "auto" needs this process's environment.
    if let Err(e) = config.daemon.shard.resolve() {
        c.add("daemon.shard", e.to_string());
    }
    let stall = config.daemon.stall_timeout_s;
    c.check(stall <= 3600, "daemon.stall_timeout_s", || format!("{stall} is above 3600 (0 turns stall detection off)"));
    let share = config.daemon.overload_drop_share;
    c.check(share > 0.0 && share <= 1.0, "daemon.overload_drop_share", || format!("{share} is outside (0, 1] (1 never reports a stream degraded)"));
    let window = config.daemon.overload_window_s;
    c.check((2..=600).contains(&window), "daemon.overload_window_s", || format!("{window} is outside 2..=600"));
    streams(&mut c, config);
    c.0
}

fn model(c: &mut Collector, config: &DaemonConfig) {
    let m = &config.model;
    c.check(m.width.is_multiple_of(32) && (64..=4096).contains(&m.width), "model.width", || {
        format!("{} must be a multiple of 32 in 64..=4096", m.width)
    });
    c.check(m.height == 0 || (m.height.is_multiple_of(32) && (64..=4096).contains(&m.height)), "model.height", || {
        format!("{} must be 0 (from the first stream's aspect) or a multiple of 32 in 64..=4096", m.height)
    });
    let t = m.confidence_threshold;
    c.check((0.0..=1.0).contains(&t), "model.confidence_threshold", || format!("{t} is outside 0..=1"));
    let e = m.exposure_target;
    c.check((0.0..1.0).contains(&e), "model.exposure_target", || format!("{e} must be 0 (off) or a mean luma below 1, e.g. 0.25"));
    c.check(!m.road_classes.is_empty(), "model.road_classes", || "must name at least one class, e.g. [\"road\"]".into());
    for (i, class) in m.road_classes.iter().enumerate() {
        c.check(!class.trim().is_empty(), format!("model.road_classes[{i}]"), || "must not be empty".into());
    }
}

fn listeners(c: &mut Collector, config: &DaemonConfig) {
    let parse = |c: &mut Collector, field: &str, listen: &str| -> Option<SocketAddr> {
        if listen.trim().is_empty() {
            return None;
        }
        let addr = listen.trim().parse::<SocketAddr>().ok();
        c.check(addr.is_some(), field, || format!("'{listen}' is not an IP:port address (e.g. 127.0.0.1:9464), or \"\" to disable"));
        addr
    };
    let metrics = parse(c, "metrics.listen", &config.metrics.listen);
    let rtsp = parse(c, "rtsp.listen", &config.rtsp.listen);
    if metrics.is_some() && metrics == rtsp {
        c.add("rtsp.listen", format!("{} is also metrics.listen", config.rtsp.listen.trim()));
    }
    let r = &config.rtsp;
    credentials(c, "rtsp", &r.username, &r.password);
    // Safe default: no anonymous video for other hosts unless asked for.
    if rtsp.is_some_and(|a| !a.ip().is_loopback()) && r.username.is_none() && r.password.is_none() && !r.allow_anonymous {
        c.add(
            "rtsp.listen",
            format!(
                "{} is reachable from other hosts but no credentials are set: set rtsp.username and rtsp.password, \
                 listen on 127.0.0.1, or set rtsp.allow_anonymous = true to serve video to anyone who can connect",
                r.listen.trim()
            ),
        );
    }
    let m = &config.metrics;
    credentials(c, "metrics", &m.username, &m.password);
    if metrics.is_some_and(|a| !a.ip().is_loopback()) && m.username.is_none() && r.credentials().is_none() {
        c.add(
            "metrics.listen",
            format!(
                "{} is reachable from other hosts, which shows them the video: set metrics.username and metrics.password (or rtsp.username and rtsp.password) for Basic auth",
                m.listen.trim()
            ),
        );
    }
}

/// A section's Basic auth pair: both or neither, and a username Basic auth can carry.
fn credentials(c: &mut Collector, section: &str, username: &Option<String>, password: &Option<String>) {
    let both = || format!("missing: set both {section}.username and {section}.password, or neither");
    match (username, password) {
        (Some(_), None) => c.add(format!("{section}.password"), both()),
        (None, Some(_)) => c.add(format!("{section}.username"), both()),
        (Some(u), Some(_)) => c.check(!u.is_empty() && !u.contains(':'), format!("{section}.username"), || "must be non-empty and hold no ':'".into()),
        (None, None) => {}
    }
}

fn streams(c: &mut Collector, config: &DaemonConfig) {
    if config.streams.is_empty() {
        c.add("streams", "no streams configured; add at least one [[streams]] table");
    }
    // First user of each name / output, to name it in duplicate errors.
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut outputs: HashMap<(&str, String), usize> = HashMap::new();
    for (i, s) in config.streams.iter().enumerate() {
        let at = |key: &str| format!("streams[{i}].{key}");
        stream_name(c, i, &s.name);
        match names.get(s.name.as_str()) {
            Some(j) => c.add(at("name"), format!("'{}' is already the name of streams[{j}]", s.name)),
            None => {
                names.insert(&s.name, i);
            }
        }
        if let Err(e) = SourceUri::parse(&s.uri) {
            c.add(at("uri"), e.to_string());
        }
        stream_settings(c, i, s);
        output(c, i, &s.output, config);
        // Outputs that would collide on disk or on the RTSP server.
        let o = &s.output;
        let targets = [
            ("output.file", o.file.as_deref().map(|f| expand_lossy(f, &s.name, UNIX_EPOCH))),
            ("output.stats", o.stats.as_deref().map(|f| expand_lossy(f, &s.name, UNIX_EPOCH))),
            ("output.rtsp", o.rtsp_mount(&s.name)),
        ];
        for (key, target) in targets {
            let Some(target) = target else { continue };
            match outputs.get(&(key, target.clone())) {
                Some(j) => c.add(at(key), format!("'{target}' is also streams[{j}].{key}")),
                None => {
                    outputs.insert((key, target), i);
                }
            }
        }
    }
}

fn stream_name(c: &mut Collector, i: usize, name: &str) {
    let ok = !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    c.check(ok, format!("streams[{i}].name"), || {
        format!("'{name}' must be 1 to 64 characters from A-Z, a-z, 0-9, _ and - (it is used in paths and metric labels)")
    });
}

fn stream_settings(c: &mut Collector, i: usize, s: &StreamConfig) {
    let at = |key: &str| format!("streams[{i}].{key}");
    c.check(s.latency_ms <= 60_000, at("latency_ms"), || format!("{} is above 60000", s.latency_ms));
    c.check((1..=1024).contains(&s.ring_capacity), at("ring_capacity"), || format!("{} is outside 1..=1024", s.ring_capacity));
    if let Some(fps) = s.infer_fps {
        c.check(fps > 0.0 && fps <= 1000.0, at("infer_fps"), || format!("{fps} is outside (0, 1000] frames a second (leave it out for every frame)"));
    }
    c.check(s.smooth_weight > 0.0 && s.smooth_weight <= 1.0, at("smooth_weight"), || {
        format!("{} is outside (0, 1] (1 = no smoothing; turn it off with smooth = false)", s.smooth_weight)
    });
    if s.r#loop {
        let file = matches!(s.source(), Ok(u) if u.scheme == super::Scheme::File);
        c.check(file, at("loop"), || "only a file can be looped (a camera or stream never ends)".into());
        c.check(s.live != Some(false), at("loop"), || "a looped file plays forever: it needs live = true (the default with loop), or a run would never end".into());
    }
    c.check(s.reconnect_initial_ms >= 1, at("reconnect_initial_ms"), || "must be at least 1".into());
    c.check(s.reconnect_initial_ms <= s.reconnect_max_ms, at("reconnect_initial_ms"), || {
        format!("{} is above reconnect_max_ms ({})", s.reconnect_initial_ms, s.reconnect_max_ms)
    });
}

fn output(c: &mut Collector, i: usize, o: &OutputConfig, config: &DaemonConfig) {
    let at = |key: &str| format!("streams[{i}].output.{key}");
    if let Some(h) = o.retain_hours {
        c.check(h > 0.0 && h.is_finite(), at("retain_hours"), || format!("{h} must be a positive number of hours (leave it out to keep recordings)"));
    }
    c.check((100..=100_000).contains(&o.bitrate_kbps), at("bitrate_kbps"), || {
        format!("{} is outside 100..=100000 kbit/s", o.bitrate_kbps)
    });
    if o.is_empty() {
        let why = if o.file.is_some() { format!(" (file is not written with record = \"{}\")", o.record.as_str()) } else { String::new() };
        c.add(format!("streams[{i}].output"), format!("nothing to write; set file, rtsp or stats{why}"));
    }
    for (key, template) in [("file", &o.file), ("stats", &o.stats)] {
        let Some(t) = template else { continue };
        if t.trim().is_empty() {
            c.add(at(key), "must not be empty (leave it out to disable)");
        } else if t.ends_with('/') {
            c.add(at(key), format!("'{t}' names a folder; add a file name, e.g. {t}{{stream}}-{{start}}.mp4"));
        } else if let Some(p) = unknown_placeholder(t) {
            c.add(at(key), format!("unknown placeholder {p} in '{t}' (use {{stream}} and {{start}})"));
        } else if key == "file" && crate::clock::has_conversions(t) {
            if let Some(conv) = crate::clock::unknown_conversion(t) {
                c.add(at(key), format!("unknown time conversion {conv} in '{t}' (use %Y %m %d %H %M %S, %% for a literal %)"));
            } else if !t.contains("%S") {
                c.add(at(key), format!("'{t}' names segments by time but has no %S: segments started within one minute would share a name"));
            }
        }
    }
    c.check(o.segment_seconds >= 1, at("segment_seconds"), || "must be at least 1".into());
    c.check(!o.stats_masks || o.stats.is_some(), at("stats_masks"), || "set, but there is no stats file to carry the masks (set stats)".into());
    match o.record {
        RecordMode::Source => {
            c.check(o.file.is_some(), at("record"), || "\"source\" records into file, which is not set (set file)".into());
            for (key, set) in [("record_fps", o.record_fps.is_some()), ("record_width", o.record_width.is_some())] {
                c.check(!set, at(key), || "applies to the annotated recording; record = \"source\" keeps the camera's own frames (remove it, or set record = \"annotated\")".into());
            }
        }
        RecordMode::Masks => {
            c.check(o.stats.is_some(), at("record"), || "\"masks\" writes each frame's road into the stats file, which is not set (set stats)".into());
        }
        RecordMode::Annotated | RecordMode::None => {}
    }
    if let Some(fps) = o.record_fps {
        c.check((0.1..=240.0).contains(&fps), at("record_fps"), || format!("{fps} is outside 0.1..=240 frames a second"));
    }
    if let Some(w) = o.record_width {
        c.check((64..=7680).contains(&w), at("record_width"), || format!("{w} is outside 64..=7680 pixels"));
    }
    if let Some(path) = &o.rtsp {
        let bare = path.replace("{stream}", "x");
        let ok = !bare.trim_matches('/').is_empty()
            && !bare.contains("//")
            && bare.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b));
        c.check(ok, at("rtsp"), || format!("'{path}' is not a mount path like \"front\" or \"cams/front\" (A-Z, a-z, 0-9, _ - . /)"));
        c.check(!config.rtsp.listen.trim().is_empty(), at("rtsp"), || "set, but rtsp.listen is \"\" (RTSP server disabled)".into());
    }
}

pub(super) fn model_path_problems(path: &Path) -> Vec<Problem> {
    // A Hub name is checked when it is fetched (check-config and run do).
    if matches!(crate::hub::model_source(path), crate::hub::ModelSource::Hub(_)) {
        return Vec::new();
    }
    let shown = path.display();
    let message = if let Err(not_found) = crate::checkpoint::locate_model(path) {
        // The bundled default, searched for in vain: say everywhere it was looked for.
        not_found.to_string()
    } else if !path.exists() {
        format!("{shown} does not exist")
    } else if !path.is_dir() {
        format!("{shown} is not a folder (a SegFormer checkpoint folder holds config.json and model.safetensors)")
    } else if !path.join("config.json").is_file() {
        format!("{shown} has no config.json (a SegFormer checkpoint folder)")
    } else {
        return Vec::new();
    };
    vec![Problem::new("model.path", message)]
}

pub(super) fn warnings(config: &DaemonConfig) -> Vec<String> {
    let mut w = Vec::new();
    for (i, s) in config.streams.iter().enumerate() {
        if let Some(file) = s.output.file.as_deref().filter(|f| !f.contains("{start}") && !crate::clock::has_conversions(f)) {
            w.push(format!(
                "streams[{i}].output.file: '{file}' has no {{start}}: after a restart, new segments overwrite the previous run's"
            ));
        }
    }
    let serves_rtsp = config.streams.iter().any(|s| s.output.rtsp.is_some());
    if serves_rtsp
        && config.rtsp.credentials().is_none()
        && config.rtsp.listen_addr().is_some_and(|a| !a.ip().is_loopback())
    {
        w.push(format!("rtsp.listen: {} serves video beyond this host without authentication", config.rtsp.listen.trim()));
    }
    w
}
