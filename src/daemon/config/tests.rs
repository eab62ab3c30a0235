use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use super::*;

const BRIEF_EXAMPLE: &str = r#"
[model]
path = "models/roadseg-camvid"
width = 1024
height = 0
device = "auto"
precision = "auto"
preset = "fast"
road_classes = ["road"]
confidence_threshold = 0.5
[workers]
count = 1
[metrics]
listen = "127.0.0.1:9464"
[rtsp]
listen = "127.0.0.1:8554"
[annotate]
road_colour = [255, 0, 200]
road_alpha = 0.45
full_palette = false
show_unknown = true
overlay_text = true
[daemon]
shutdown_timeout_s = 10
[[streams]]
name = "front"
uri = "rtsp://10.0.0.5/stream1"
live = true
latency_ms = 200
rtsp_transport = "tcp"
ring_capacity = 8
reconnect_initial_ms = 500
reconnect_max_ms = 30000
[streams.output]
file = "/var/lib/roadseg/recordings/{stream}-{start}.mp4"
segment_seconds = 300
rtsp = "front"
stats = "/var/lib/roadseg/{stream}.jsonl"
"#;

fn parse(text: &str) -> DaemonConfig {
    DaemonConfig::from_toml_str(text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> String {
    match DaemonConfig::from_toml_str(text, "test.toml") {
        Ok(c) => panic!("expected an error, parsed {c:?}"),
        Err(e) => e.to_string(),
    }
}

/// Parses each text, expecting an error that contains every one of its texts; the errors.
fn expect_errors(cases: &[(&str, &[&str])]) -> Vec<String> {
    let mut errors = Vec::new();
    for (text, expected) in cases {
        let e = parse_err(text);
        for want in *expected {
            assert!(e.contains(want), "{text:?}: expected {want:?} in: {e}");
        }
        errors.push(e);
    }
    errors
}

/// A config that passes `validate()`: one test-source stream with a stats file.
fn valid() -> DaemonConfig {
    let mut s = StreamConfig::new("cam", "test://smpte?width=640&height=360&fps=25");
    s.output.stats = Some("{stream}.jsonl".into());
    DaemonConfig { streams: vec![s], ..DaemonConfig::default() }
}

/// The fields `validate()` complains about.
fn problem_fields(c: &DaemonConfig) -> Vec<String> {
    match c.validate() {
        Ok(()) => Vec::new(),
        Err(ConfigError::Invalid(p)) => p.iter().map(|p| p.field.clone()).collect(),
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn assert_problem(c: &DaemonConfig, field: &str, needle: &str) {
    let Err(ConfigError::Invalid(problems)) = c.validate() else { panic!("expected {field} to be rejected") };
    let found = problems.iter().find(|p| p.field == field).unwrap_or_else(|| panic!("no problem for {field} in: {problems}"));
    assert!(found.message.contains(needle), "message for {field} lacks '{needle}': {found}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn env(vars: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

#[test]
fn empty_file_gives_documented_defaults() {
    // Rule: every section has a default, so an empty file is the defaults.
    let c = parse("");
    assert_eq!(c, DaemonConfig::default());
    assert_eq!(c.model.path, PathBuf::from("models/roadseg-camvid"));
    assert_eq!((c.model.width, c.model.height), (1024, 0));
    assert_eq!(c.model.device, crate::device::DeviceRequest::Auto);
    assert_eq!(c.model.precision, None);
    assert_eq!(c.model.road_classes, vec!["road".to_string()]);
    assert_eq!(c.workers.count, WorkerCount::Auto);
    assert_eq!(c.workers.batch, 1);
    assert_eq!(c.metrics.listen, "127.0.0.1:9464");
    assert_eq!(c.rtsp.listen, "127.0.0.1:8554");
    assert_eq!(c.annotate.road_colour, [255, 0, 200]);
    assert_eq!(c.daemon.shutdown_timeout_s, 10);
    assert!(c.streams.is_empty());
}

#[test]
fn brief_example_parses_and_validates() {
    // Rule: the documented example is a valid configuration.
    let c = parse(BRIEF_EXAMPLE);
    c.validate().unwrap();
    let s = &c.streams[0];
    assert_eq!(s.live, Some(true));
    assert_eq!(s.rtsp_transport, RtspTransport::Tcp);
    assert_eq!(s.output.rtsp.as_deref(), Some("front"));
}

#[test]
fn stream_defaults_apply_per_field() {
    // Rule: a stream needs only name, uri and one output.
    let c = parse("[[streams]]\nname = \"a\"\nuri = \"file:///v.mp4\"\noutput.stats = \"a.jsonl\"\n");
    let s = &c.streams[0];
    assert_eq!((s.latency_ms, s.ring_capacity, s.reconnect_initial_ms, s.reconnect_max_ms), (200, 8, 500, 30_000));
    assert_eq!(s.output.segment_seconds, 300);
    c.validate().unwrap();
}

#[test]
fn road_classes_take_a_list_or_a_comma_separated_string() {
    // Rule: road_classes is an array of names, or one string of comma-separated names.
    assert_eq!(parse("model.road_classes = [\"road\", \"lane\"]").model.road_classes, ["road", "lane"]);
    assert_eq!(parse("model.road_classes = \"road, lane\"").model.road_classes, ["road", "lane"]);
}

#[test]
fn precision_accepts_auto_and_names() {
    // Rule: precision is auto (None) or a Precision.
    assert_eq!(parse("model.precision = \"fp16\"").model.precision, Some(crate::backend::Precision::Fp16));
    assert_eq!(parse("model.precision = \"AUTO\"").model.precision, None);
    let e = parse_err("model.precision = \"fp8\"");
    assert!(e.contains("model.precision") && e.contains("fp8"), "{e}");
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    // Rule: unknown keys anywhere are errors naming the key, its whole path, and the file and line that write it.
    let cases: &[(&str, &[&str])] = &[
        ("[modle]\npath = \"x\"", &["modle"]),
        ("[model]\ndevcie = \"cpu\"", &["devcie", "model"]),
        ("[[streams]]\nname = \"a\"\nuri = \"test://\"\ncolour = 1\n", &["colour", "streams[0]"]),
        ("[[streams]]\nname = \"a\"\nuri = \"test://\"\n[streams.output]\nfiles = \"x.mp4\"\n", &["files", "streams[0].output"]),
    ];
    for (e, line) in expect_errors(cases).iter().zip([1, 2, 4, 5]) {
        assert!(e.starts_with(&format!("test.toml, line {line}: unknown key `")), "file and line named: {e}");
    }
}

#[test]
fn bad_types_name_the_field() {
    // Rule: a value of the wrong type is an error naming its field.
    // A missing stream name is named; syntax errors name the origin.
    expect_errors(&[
        ("[workers]\ncount = \"two\"", &["workers.count"]),
        ("[annotate]\nroad_colour = [300, 0, 0]", &["annotate.road_colour"]),
        ("[model]\npreset = \"medium\"", &["model.preset", "'medium' (expected fast or accurate)"]),
        ("[model]\ndevice = \"tpu\"", &["model.device", "tpu"]),
        ("[[streams]]\nname = \"a\"\nuri = \"test://\"\nrtsp_transport = \"quic\"", &["streams[0].rtsp_transport", "expected tcp, udp or auto"]),
        ("[[streams]]\nuri = \"test://\"", &["streams[0].name"]),
        ("[model\n", &["test.toml"]),
    ]);
}

#[test]
fn layers_apply_in_order_and_env_wins() {
    // Rule: defaults < system file < given file < ROADSEG__* environment; arrays are replaced whole.
    let dir = tempfile::tempdir().unwrap();
    let system = write(dir.path(), "system.toml", "[workers]\ncount = 3\n[[streams]]\nname = \"sys\"\nuri = \"test://\"\n");
    let file = write(dir.path(), "mine.toml", "[model]\nwidth = 512\ndevice = \"cuda\"\n[[streams]]\nname = \"mine\"\nuri = \"test://\"\n");
    let sources = Sources {
        system: Some(system),
        file: Some(file),
        env: env(&[
            ("ROADSEG__MODEL__DEVICE", "cpu"),
            ("ROADSEG__METRICS__LISTEN", ""),
            ("ROADSEG__MODEL__ROAD_CLASSES", "road,lane"),
            ("ROADSEG__MODEL__CONFIDENCE_THRESHOLD", "0.7"),
            ("ROADSEG_LOG", "debug"),
            ("UNRELATED", "1"),
        ]),
    };
    let c = DaemonConfig::load_from(&sources).unwrap();
    assert_eq!(c.workers.count, WorkerCount::Fixed(3));
    assert_eq!(c.model.width, 512);
    assert_eq!(c.model.device, crate::device::DeviceRequest::Cpu);
    assert_eq!(c.metrics.listen, "");
    assert_eq!(c.model.road_classes, vec!["road".to_string(), "lane".to_string()]);
    assert_eq!(c.model.confidence_threshold, 0.7);
    let names: Vec<&str> = c.streams.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["mine"]);
}

#[test]
fn env_values_convert_to_each_fields_type_and_unknown_keys_are_errors() {
    // Rule: ROADSEG__SECTION__KEY values take the field's type (strings stay verbatim); unknown keys are errors naming the key.
    let vars = [
        ("ROADSEG__WORKERS__COUNT", "2"),
        ("ROADSEG__ANNOTATE__FULL_PALETTE", "true"),
        ("ROADSEG__RTSP__USERNAME", "007"),
        ("ROADSEG__RTSP__PASSWORD", "0012"),
    ];
    let c = DaemonConfig::load_from(&Sources { env: env(&vars), ..Sources::default() }).unwrap();
    assert_eq!(c.workers.count, WorkerCount::Fixed(2));
    assert!(c.annotate.full_palette);
    assert_eq!(c.rtsp.credentials(), Some(("007", "0012")));
    let sources = Sources { env: env(&[("ROADSEG__WORKERS__COUNT", "auto")]), ..Sources::default() };
    assert_eq!(DaemonConfig::load_from(&sources).unwrap().workers.count, WorkerCount::Auto);
    let sources = Sources { env: env(&[("ROADSEG__WORKERS__COUNT", "two")]), ..Sources::default() };
    let e = DaemonConfig::load_from(&sources).unwrap_err().to_string();
    assert!(e.contains("workers.count") && e.contains("environment"), "{e}");
    let sources = Sources { env: env(&[("ROADSEG__MODEL__DEVCE", "cpu")]), ..Sources::default() };
    let e = DaemonConfig::load_from(&sources).unwrap_err().to_string();
    assert!(e.contains("devce") && e.contains("environment"), "{e}");
}

#[test]
fn missing_given_file_is_named_and_missing_system_file_is_skipped() {
    // Rule: the given file is required; the system file is optional.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let sources = Sources { system: Some(dir.path().join("absent.toml")), file: Some(missing.clone()), env: env(&[]) };
    let e = DaemonConfig::load_from(&sources).unwrap_err();
    assert!(matches!(&e, ConfigError::NotFound(p) if *p == missing), "{e}");
    assert!(e.to_string().contains("nope.toml"));
    let sources = Sources { file: None, ..sources };
    assert_eq!(DaemonConfig::load_from(&sources).unwrap(), DaemonConfig::default());
}

#[test]
fn system_file_given_explicitly_is_read_once() {
    // Rule: `--config /etc/roadseg/roadseg.toml` does not list that file as two layers.
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "roadseg.toml", "[workers]\ncount = 2\n");
    let sources = Sources { system: Some(path.clone()), file: Some(path.clone()), env: env(&[]) };
    assert_eq!(sources.describe().matches("roadseg.toml").count(), 1);
    assert_eq!(DaemonConfig::load_from(&sources).unwrap().workers.count, WorkerCount::Fixed(2));
    let path = write(dir.path(), "auto.toml", "[workers]\ncount = \"auto\"\n");
    let sources = Sources { system: None, file: Some(path), env: env(&[]) };
    assert_eq!(DaemonConfig::load_from(&sources).unwrap().workers.count, WorkerCount::Auto);
}

#[test]
fn validation_accepts_the_baseline() {
    // Rule: the helper config used below is valid, so each failure is the mutation's.
    assert_eq!(problem_fields(&valid()), Vec::<String>::new());
}

#[test]
fn validation_rules_for_global_sections() {
    // Rule: each global setting outside its range is reported under its own field.
    let check = |f: fn(&mut DaemonConfig), field: &str, needle: &str| {
        let mut c = valid();
        f(&mut c);
        assert_problem(&c, field, needle);
    };
    check(|c| c.streams.clear(), "streams", "at least one");
    check(|c| c.model.width = 1000, "model.width", "multiple of 32");
    check(|c| c.model.width = 32, "model.width", "64..=4096");
    check(|c| c.model.width = 8192, "model.width", "64..=4096");
    check(|c| c.model.height = 100, "model.height", "multiple of 32");
    check(|c| c.model.confidence_threshold = 1.5, "model.confidence_threshold", "0..=1");
    check(|c| c.model.confidence_threshold = f32::NAN, "model.confidence_threshold", "0..=1");
    check(|c| c.model.exposure_target = 1.0, "model.exposure_target", "below 1");
    check(|c| c.model.exposure_target = -0.5, "model.exposure_target", "0 (off)");
    check(|c| c.model.road_classes.clear(), "model.road_classes", "at least one");
    check(|c| c.annotate.road_alpha = -0.1, "annotate.road_alpha", "0..=1");
    check(|c| c.workers.count = WorkerCount::Fixed(0), "workers.count", "1..=64");
    check(|c| c.workers.count = WorkerCount::Fixed(65), "workers.count", "1..=64");
    check(|c| c.workers.batch = 0, "workers.batch", "1..=16");
    check(|c| c.workers.batch = 17, "workers.batch", "1..=16");
    check(|c| c.metrics.listen = "localhost:9464".into(), "metrics.listen", "IP:port");
    check(|c| c.rtsp.listen = "8554".into(), "rtsp.listen", "IP:port");
    check(|c| c.rtsp.listen = c.metrics.listen.clone(), "rtsp.listen", "also metrics.listen");
    check(|c| c.rtsp.username = Some("u".into()), "rtsp.password", "both");
    check(|c| c.rtsp.password = Some("p".into()), "rtsp.username", "both");
    check(|c| c.metrics.username = Some("u".into()), "metrics.password", "both");
    check(|c| c.metrics.listen = "0.0.0.0:9464".into(), "metrics.listen", "Basic auth");
    check(|c| c.daemon.shutdown_timeout_s = 0, "daemon.shutdown_timeout_s", "1..=600");
    check(|c| c.daemon.overload_drop_share = 0.0, "daemon.overload_drop_share", "(0, 1]");
    check(|c| c.daemon.overload_drop_share = f64::NAN, "daemon.overload_drop_share", "(0, 1]");
    check(|c| c.daemon.overload_window_s = 1, "daemon.overload_window_s", "2..=600");
    let mut c = valid();
    c.metrics.listen = String::new();
    c.model.height = 576;
    assert_eq!(problem_fields(&c), Vec::<String>::new(), "\"\" disables metrics; explicit height is fine");
}

#[test]
fn validation_rules_for_streams() {
    // Rule: each stream setting is checked and reported as streams[i].key.
    let check = |f: fn(&mut StreamConfig), field: &str, needle: &str| {
        let mut c = valid();
        f(&mut c.streams[0]);
        assert_problem(&c, field, needle);
    };
    check(|s| s.name = "front cam".into(), "streams[0].name", "A-Z");
    check(|s| s.name = String::new(), "streams[0].name", "1 to 64");
    check(|s| s.uri = "ftp://x/y".into(), "streams[0].uri", "unsupported scheme");
    check(|s| s.uri = "/videos/a.mp4".into(), "streams[0].uri", "not a URI");
    check(|s| s.uri = "file://videos/a.mp4".into(), "streams[0].uri", "absolute path");
    check(|s| s.uri = "rtsp:///stream".into(), "streams[0].uri", "need a host");
    check(|s| s.uri = "rtsp://cam:99999/s".into(), "streams[0].uri", "port");
    check(|s| s.uri = "v4l2://video0".into(), "streams[0].uri", "device node");
    check(|s| s.uri = "test://smpte?width=wide".into(), "streams[0].uri", "width");
    check(|s| s.ring_capacity = 0, "streams[0].ring_capacity", "1..=1024");
    check(|s| s.reconnect_initial_ms = 40_000, "streams[0].reconnect_initial_ms", "reconnect_max_ms");
    check(|s| s.output = OutputConfig::default(), "streams[0].output", "nothing to write; set file, rtsp or stats");
    check(|s| s.output.file = Some("/rec/".into()), "streams[0].output.file", "folder");
    check(|s| s.output.file = Some("/rec/{camera}.mp4".into()), "streams[0].output.file", "{camera}");
    check(|s| s.output.stats = Some(String::new()), "streams[0].output.stats", "empty");
    check(|s| s.output.segment_seconds = 0, "streams[0].output.segment_seconds", "at least 1");
    check(|s| s.output.rtsp = Some("front cam".into()), "streams[0].output.rtsp", "mount path");
    check(|s| s.output.rtsp = Some("/".into()), "streams[0].output.rtsp", "mount path");
    check(|s| (s.output.file, s.output.record) = (None, RecordMode::Source), "streams[0].output.record", "file, which is not set");
    check(|s| (s.output.record_fps, s.output.record) = (Some(5.0), RecordMode::Source), "streams[0].output.record_fps", "annotated");
    check(|s| (s.output.record_width, s.output.record) = (Some(640), RecordMode::Source), "streams[0].output.record_width", "annotated");
    check(|s| (s.output.stats, s.output.record) = (None, RecordMode::Masks), "streams[0].output.record", "stats file, which is not set");
    check(
        |s| s.output = OutputConfig { file: Some("/rec/{stream}.mp4".into()), record: RecordMode::None, ..OutputConfig::default() },
        "streams[0].output",
        "file is not written with record = \"none\"",
    );
}

#[test]
fn record_modes_decide_what_file_and_stats_carry() {
    // Rule: "annotated" and "source" record into file; "masks" and "none" leave it unwritten, "masks" putting each frame's road into the stats lines; modes are written in lower case and nothing else parses.
    let o = |record| OutputConfig { file: Some("r/{stream}.mp4".into()), stats: Some("s.jsonl".into()), record, ..OutputConfig::default() };
    assert_eq!(o(RecordMode::Annotated).recorded_file(), Some("r/{stream}.mp4"));
    assert_eq!(o(RecordMode::Source).recorded_file(), Some("r/{stream}.mp4"));
    assert!(o(RecordMode::Masks).recorded_file().is_none() && o(RecordMode::Masks).masks_in_stats());
    assert!(o(RecordMode::None).recorded_file().is_none() && !o(RecordMode::None).masks_in_stats());
    assert!(o(RecordMode::None).segment_location("x", std::time::UNIX_EPOCH).is_none());
    let parsed: OutputConfig = toml::from_str("record = \"source\"").unwrap();
    assert_eq!(parsed.record, RecordMode::Source);
    assert!(toml::from_str::<OutputConfig>("record = \"Source\"").is_err());
    assert!(toml::from_str::<OutputConfig>("record = \"h264\"").is_err());
}

#[test]
fn validation_rejects_collisions_between_streams() {
    // Rule: stream names, RTSP mounts, recordings and stats files are unique across streams.
    let mut c = valid();
    let mut b = c.streams[0].clone();
    c.streams.push(b.clone());
    assert_problem(&c, "streams[1].name", "streams[0]");
    b.name = "cam2".into();
    b.output.stats = Some("cam.jsonl".into()); // what streams[0]'s {stream}.jsonl expands to
    c.streams[0].output.rtsp = Some("live/{stream}".into());
    b.output.rtsp = Some("/live/cam".into());
    c.streams[1] = b;
    assert_problem(&c, "streams[1].output.stats", "streams[0].output.stats");
    assert_problem(&c, "streams[1].output.rtsp", "streams[0].output.rtsp");
    c.rtsp.listen = String::new();
    assert_problem(&c, "streams[0].output.rtsp", "rtsp.listen");
}

#[test]
fn every_problem_is_reported_at_once() {
    // Rule: validate() lists all problems, one line each.
    let mut c = valid();
    c.workers.count = WorkerCount::Fixed(0);
    c.streams[0].ring_capacity = 0;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.starts_with("2 configuration problems:"), "{e}");
    assert!(e.contains("\n  - workers.count: ") && e.contains("\n  - streams[0].ring_capacity: "), "{e}");
}

#[test]
fn model_path_must_be_a_checkpoint_folder() {
    // Rule: model.path is a folder holding config.json, checked separately from validate().
    let dir = tempfile::tempdir().unwrap();
    let mut c = valid();
    c.model.path = dir.path().to_path_buf();
    c.validate().unwrap();
    let e = c.validate_model_path().unwrap_err().to_string();
    assert_eq!(e, format!("model.path: {} has no config.json (a SegFormer checkpoint folder)", dir.path().display()));
    c.model.path = dir.path().join("absent");
    assert!(c.validate_model_path().unwrap_err().to_string().contains("does not exist"));
    write(dir.path(), "config.json", "{}");
    c.model.path = dir.path().to_path_buf();
    c.validate_model_path().unwrap();
}

#[test]
fn liveness_defaults_by_scheme() {
    // Rule: live defaults to false for file:// and true for everything else; explicit wins.
    let mut s = StreamConfig::new("a", "file:///v.mp4");
    assert!(!s.is_live());
    s.live = Some(true);
    assert!(s.is_live());
    for uri in ["rtsp://h/s", "v4l2:///dev/video0", "test://smpte", "https://h/x.m3u8"] {
        assert!(StreamConfig::new("a", uri).is_live(), "{uri}");
    }
}

#[test]
fn output_paths_expand_placeholders() {
    // Rule: {stream} and {start} expand; segments add a %05d index before the extension.
    let start = UNIX_EPOCH + Duration::from_secs(1_795_247_880);
    let o = OutputConfig {
        file: Some("/rec/{stream}-{start}.mp4".into()),
        rtsp: Some("{stream}".into()),
        stats: Some("/var/lib/roadseg/{stream}.jsonl".into()),
        ..OutputConfig::default()
    };
    assert_eq!(o.file_path("front", start).unwrap(), PathBuf::from("/rec/front-20261121T075800Z.mp4"));
    assert_eq!(o.segment_location("front", start).unwrap(), "/rec/front-20261121T075800Z-%05d.mp4");
    assert_eq!(o.segment_path("front", start, 0).unwrap(), PathBuf::from("/rec/front-20261121T075800Z-00000.mp4"));
    assert_eq!(o.stats_path("front", start).unwrap(), PathBuf::from("/var/lib/roadseg/front.jsonl"));
    assert_eq!(o.rtsp_mount("front").unwrap(), "/front");
    assert_eq!(OutputConfig::default().file_path("front", start), None);
}

#[test]
fn config_round_trips_through_toml() {
    // Rule: Serialize writes TOML that loads back to the same config.
    let c = parse(BRIEF_EXAMPLE);
    let text = toml::to_string(&c).unwrap();
    assert_eq!(parse(&text), c, "{text}");
    assert!(text.contains("precision = \"auto\""), "{text}");
}

#[test]
fn rtsp_password_is_not_debug_printed() {
    // Rule: Debug output never holds the RTSP password.
    let mut c = DaemonConfig::default();
    c.rtsp.username = Some("viewer".into());
    c.rtsp.password = Some("hunter2".into());
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn http_auth_only_beyond_loopback_and_rtsp_credentials_are_reused() {
    // Rule: the HTTP endpoint asks for Basic auth only when metrics.listen is not loopback, with [metrics]'s credentials, else [rtsp]'s; Debug never shows the password.
    let mut c = DaemonConfig::default();
    c.rtsp.username = Some("viewer".into());
    c.rtsp.password = Some("rtsp-secret".into());
    for loopback in ["127.0.0.1:9464", "127.0.0.2:9464", "[::1]:9464"] {
        c.metrics.listen = loopback.into();
        assert_eq!(c.http_credentials(), None, "{loopback}");
    }
    c.metrics.listen = "0.0.0.0:9464".into();
    assert_eq!(c.http_credentials(), Some(("viewer", "rtsp-secret")));
    c.metrics.username = Some("ops".into());
    c.metrics.password = Some("http-secret".into());
    assert_eq!(c.http_credentials(), Some(("ops", "http-secret")));
    assert!(!format!("{c:?}").contains("http-secret"));
}

#[test]
fn uri_parts_and_redaction() {
    // Rule: URIs split into scheme, authority, path and query; passwords are masked in logs.
    let u = SourceUri::parse("RTSP://admin:pw@[2001:db8::5]:554/Streaming/101?transport=tcp").unwrap();
    assert_eq!(u.scheme, Scheme::Rtsp);
    assert_eq!(u.host(), "[2001:db8::5]:554");
    assert_eq!(u.path, "/Streaming/101");
    assert_eq!(u.query_value("transport"), Some("tcp"));
    let t = SourceUri::parse("test://smpte?width=1280&height=720&fps=30000/1001").unwrap();
    assert_eq!((t.authority.as_str(), t.query_value("height")), ("smpte", Some("720")));
    assert_eq!(SourceUri::redacted("rtsp://admin:pw@10.0.0.5/s?x=1"), "rtsp://admin:***@10.0.0.5/s?x=1");
    assert_eq!(SourceUri::redacted("rtsp://10.0.0.5/s"), "rtsp://10.0.0.5/s");
    assert!(SourceUri::parse("file:///my video.mp4").unwrap_err().to_string().contains("%20"));
}

#[test]
fn warnings_flag_overwrites_and_open_rtsp() {
    // Rule: legal but risky settings produce warnings, not errors.
    let mut c = valid();
    c.streams[0].output.file = Some("/rec/{stream}.mp4".into());
    c.streams[0].output.rtsp = Some("cam".into());
    c.rtsp.listen = "0.0.0.0:8554".into();
    assert!(c.validate().unwrap_err().to_string().contains("rtsp.allow_anonymous"), "refused unless opted in");
    c.rtsp.allow_anonymous = true;
    c.validate().unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].starts_with("streams[0].output.file") && w[1].starts_with("rtsp.listen"), "{w:?}");
}

mod reload {
    use super::*;

    fn with_streams(names: &[(&str, &str)]) -> DaemonConfig {
        let mut c = valid();
        c.streams = names
            .iter()
            .map(|(n, uri)| {
                let mut s = StreamConfig::new(n, uri);
                s.output.stats = Some("{stream}.jsonl".into());
                s
            })
            .collect();
        c
    }

    #[test]
    fn streams_are_matched_by_name() {
        // Rule: reload starts new names, stops missing ones, restarts changed ones, keeps the rest.
        let old = with_streams(&[("a", "test://"), ("b", "test://"), ("c", "test://")]);
        let new = with_streams(&[("d", "test://"), ("c", "test://"), ("b", "test://ball")]);
        let plan = plan_reload(&old, &new);
        assert_eq!(plan.added, ["d"]);
        assert_eq!(plan.removed, ["a"]);
        assert_eq!(plan.changed, ["b"]);
        assert_eq!(plan.unchanged, ["c"]);
        assert!(!plan.global_changed && plan.global_sections.is_empty());
    }

    #[test]
    fn identical_configs_plan_nothing() {
        // Rule: reloading an unchanged file does nothing.
        let c = with_streams(&[("a", "test://")]);
        let plan = plan_reload(&c, &c.clone());
        assert!(plan.streams_unchanged() && !plan.global_changed);
        assert_eq!(plan.unchanged, ["a"]);
    }

    #[test]
    fn global_sections_are_flagged_not_applied() {
        // Rule: model/workers/rtsp/metrics changes set global_changed and name the sections.
        let old = with_streams(&[("a", "test://")]);
        let mut new = old.clone();
        new.model.width = 512;
        new.metrics.listen = String::new();
        new.daemon.shutdown_timeout_s = 20;
        let plan = plan_reload(&old, &new);
        assert!(plan.global_changed);
        assert_eq!(plan.global_sections, ["model", "metrics"]);
        assert_eq!(plan.unchanged, ["a"], "[daemon] changes do not restart streams");
    }

    #[test]
    fn overlay_changes_restart_every_kept_stream() {
        // Rule: an [annotate] change restarts every stream (each builds its own overlay).
        let old = with_streams(&[("a", "test://"), ("b", "test://")]);
        let mut new = with_streams(&[("a", "test://"), ("c", "test://")]);
        new.annotate.road_alpha = 0.8;
        let plan = plan_reload(&old, &new);
        assert_eq!((plan.changed.as_slice(), plan.added.as_slice(), plan.removed.as_slice()), (&["a".to_string()][..], &["c".to_string()][..], &["b".to_string()][..]));
        assert!(!plan.global_changed);
    }
}

mod files {
    use super::*;

    fn repo_file(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(name)
    }

    fn load_repo_file(name: &str) -> DaemonConfig {
        let sources = Sources { system: None, file: Some(repo_file(name)), env: env(&[]) };
        DaemonConfig::load_from(&sources).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn default_toml_is_the_defaults_plus_one_test_stream() {
        // Rule: config/default.toml states the built-in defaults and runs as shipped.
        let c = load_repo_file("default.toml");
        c.validate().unwrap();
        assert_eq!(DaemonConfig { streams: Vec::new(), ..c.clone() }, DaemonConfig::default());
        assert_eq!(c.streams.len(), 1);
        assert_eq!(c.streams[0].source().unwrap().scheme, Scheme::Test);
    }

    #[test]
    fn example_cameras_parse_and_validate() {
        // Rule: config/example-cameras.toml is valid apart from the model folder.
        let c = load_repo_file("example-cameras.toml");
        c.validate().unwrap();
        let schemes: Vec<Scheme> = c.streams.iter().map(|s| s.source().unwrap().scheme).collect();
        for scheme in [Scheme::Rtsp, Scheme::V4l2, Scheme::File] {
            assert!(schemes.contains(&scheme), "{scheme} missing from {schemes:?}");
        }
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn check_summarises_streams_and_outputs() {
        // Rule: check() validates everything, model folder included, and lists each stream's outputs.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "config.json", "{}");
        let text = std::fs::read_to_string(repo_file("example-cameras.toml")).unwrap();
        let model = dir.path().display().to_string();
        let file = write(dir.path(), "cams.toml", &text);
        let env_model = env(&[("ROADSEG__MODEL__PATH", &model)]);
        let summary = check_sources(&Sources { system: None, file: Some(file.clone()), env: env_model }).unwrap();
        let shown = summary.to_string();
        for s in &summary.config.streams {
            assert!(shown.contains(&format!("  {}: ", s.name)), "{shown}");
        }
        assert!(shown.contains("rtsp:  rtsp://0.0.0.0:8554/gate-north\n"), "{shown}");
        assert!(shown.contains("file:  /var/lib/roadseg/recordings/gate-north/gate-north-{start}-NNNNN.mp4 (600 s segments)"), "{shown}");
        assert!(!shown.contains("CHANGE-ME"), "camera passwords are masked: {shown}");
        // The example names the bundled model, which a checkout holds; a folder that is not there is refused by name.
        let missing = dir.path().join("no-such-model").display().to_string();
        let env_missing = env(&[("ROADSEG__MODEL__PATH", &missing)]);
        let e = check_sources(&Sources { system: None, file: Some(file), env: env_missing }).unwrap_err().to_string();
        assert!(e.contains("model.path") && e.contains("no-such-model"), "{e}");
    }
}

#[test]
fn only_files_loop_and_a_looped_file_is_live() {
    // Rule: `loop = true` is accepted for a file (which then defaults to live pacing), refused for a camera and for live = false.
    let dir = tempfile::tempdir().unwrap();
    let clip = write(dir.path(), "clip.mp4", "");
    let mut c = valid();
    c.streams[0].uri = format!("file://{}", clip.display());
    c.streams[0].r#loop = true;
    assert!(c.streams[0].is_live());
    assert!(!problem_fields(&c).iter().any(|f| f.ends_with("loop")), "{:?}", problem_fields(&c));
    c.streams[0].live = Some(false);
    assert_problem(&c, "streams[0].loop", "live = true");
    let mut c = valid();
    c.streams[0].uri = "rtsp://10.0.0.5/stream1".into();
    c.streams[0].r#loop = true;
    assert_problem(&c, "streams[0].loop", "only a file");
    let parsed = parse(&format!("[[streams]]\nname = \"f\"\nuri = \"file://{}\"\nloop = true\n", clip.display()));
    assert!(parsed.streams[0].r#loop);
}

#[test]
fn shard_is_read_from_toml_and_environment_and_bad_ones_name_daemon_shard() {
    // Rule: [daemon] shard = "I/N" | "auto" (default "0/1"), also ROADSEG__DAEMON__SHARD; "3/3", "0/0", "x" are errors naming daemon.shard.
    assert_eq!(DaemonConfig::default().daemon.shard, ShardSetting::Fixed(Shard::ALL));
    assert_eq!(parse("[daemon]\nshard = \"1/3\"").daemon.shard, ShardSetting::Fixed(Shard { index: 1, count: 3 }));
    assert_eq!(parse("[daemon]\nshard = \"auto\"").daemon.shard, ShardSetting::Auto);
    let c = DaemonConfig::load_from(&Sources { env: env(&[("ROADSEG__DAEMON__SHARD", "2/3")]), ..Sources::default() }).unwrap();
    assert_eq!(c.daemon.shard, ShardSetting::Fixed(Shard { index: 2, count: 3 }));
    expect_errors(&[
        ("[daemon]\nshard = \"3/3\"", &["daemon.shard", "0 to 2"]),
        ("[daemon]\nshard = \"0/0\"", &["daemon.shard", "count of 0"]),
        ("[daemon]\nshard = \"x\"", &["daemon.shard", "\"I/N\""]),
    ]);
    for bad in ["3/3", "0/0", "x"] {
        let sources = Sources { env: env(&[("ROADSEG__DAEMON__SHARD", bad)]), ..Sources::default() };
        let e = DaemonConfig::load_from(&sources).unwrap_err().to_string();
        assert!(e.contains("daemon.shard") && e.contains("environment"), "{bad}: {e}");
    }
}

#[test]
fn check_config_says_which_streams_this_shard_runs_and_skips() {
    // Rule: a sharded config's summary names the streams this daemon runs and the ones it skips (and whose they are).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "config.json", "{}");
    let mut text = format!("[model]\npath = {:?}\n[daemon]\nshard = \"1/3\"\n", dir.path().display().to_string());
    for i in 0..9 {
        text += &format!("[[streams]]\nname = \"cam-{i}\"\nuri = \"test://\"\n[streams.output]\nstats = \"{{stream}}.jsonl\"\n");
    }
    let file = write(dir.path(), "sharded.toml", &text);
    let shown = check_sources(&Sources { system: None, file: Some(file), env: env(&[]) }).unwrap().to_string();
    // Shards of cam-0..cam-8 over 3: 1 1 0 0 2 0 0 1 2 (see daemon::shard's fixed values).
    assert!(shown.contains("shard: 1/3: runs 3 of 9 streams\n  runs:  cam-0, cam-1, cam-7\n  skips: cam-2, cam-3, cam-4, cam-5, cam-6, cam-8\n"), "{shown}");
    assert!(shown.contains("  cam-2: test:// (live, ring 8, skipped: shard 0 of 3 runs it)"), "{shown}");
    assert!(shown.contains("  cam-0: test:// (live, ring 8)\n"), "{shown}");
}
