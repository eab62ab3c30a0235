//! Models by name from the Hugging Face Hub (`--model org/name[@rev]`),
//! against a mock of the Hub's HTTP API on loopback: nothing here may
//! reach the internet. Checks the cache layout `transformers` shares, the
//! offline mode, the token's handling, checksums, and that each failure
//! has its clear message and exit code.
#![cfg(feature = "video")]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::mock_hub::{Fault, MockHub, MockRepo, segformer_repo, sha256_hex};
use crate::common::repo;

const COMMIT: &str = "4f1c2e0d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d";
const FIXTURE: &str = "tests/data/odd-bf16-203x141";

/// `roadseg ARGS` with the Hub at `endpoint` and the cache under `home`;
/// the caller's own Hub settings and proxies never leak in.
fn roadseg_hub(endpoint: &str, home: &Path, extra_env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_roadseg"));
    cmd.args(args).current_dir(repo()).env("ROADSEG_LOG", "info").env("NO_COLOR", "1");
    for var in ["HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH", "XDG_CACHE_HOME"] {
        cmd.env_remove(var);
    }
    for var in ["ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        cmd.env_remove(var);
    }
    cmd.env("HF_ENDPOINT", endpoint).env("HF_HOME", home).envs(extra_env.iter().copied());
    let out = cmd.output().expect("run roadseg");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

fn hub_with_tiny() -> MockHub {
    let hub = MockHub::start();
    let mut repo = segformer_repo(&repo().join(FIXTURE), COMMIT);
    repo.refs.push("v1".into());
    hub.add("org/tiny", repo);
    hub
}

/// `roadseg infer` of one small image: the quickest full use of a model.
fn infer_args<'a>(model: &'a str, image: &'a str, out: &'a str) -> Vec<&'a str> {
    vec!["infer", "--model", model, "--device", "cpu", "--size", "64x64", "--image", image, "--classes-out", out]
}

fn image(dir: &Path) -> PathBuf {
    let path = dir.join("frame.png");
    image::RgbImage::from_fn(96, 64, |x, y| image::Rgb([(x * 2) as u8, (y * 3) as u8, 90])).save(&path).unwrap();
    path
}

#[test]
fn a_hub_model_is_fetched_into_the_shared_cache_then_used_offline_and_without_the_network() {
    // Rule: `process --model org/name` works from a cold cache, lays files out as huggingface_hub does, then runs offline with no request.
    let hub = hub_with_tiny();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("hf");
    let clip = tmp.path().join("drive.mp4");
    let (code, _, err) = crate::common::roadseg(&["synth", "-o", clip.to_str().unwrap(), "--frames", "8", "--size", "320x180", "--fps", "25"]);
    assert_eq!(code, 0, "{err}");
    let out = tmp.path().join("out.mp4");
    let process = |env: &[(&str, &str)], endpoint: &str| {
        roadseg_hub(endpoint, &home, env, &["process", clip.to_str().unwrap(), "--model", "org/tiny", "--device", "cpu", "--size", "128x64", "-o", out.to_str().unwrap()])
    };
    let (code, _, err) = process(&[], &hub.endpoint());
    assert_eq!(code, 0, "cold cache: {err}");
    assert!(out.is_file() && std::fs::metadata(&out).unwrap().len() > 0);
    assert!(err.contains("downloaded") && err.contains(COMMIT), "the log says what was fetched: {err}");
    assert!(!err.contains("none of the road classes"), "the Cityscapes road class is found by name: {err}");

    // The layout huggingface_hub (and so transformers) reads and writes.
    let repo_dir = home.join("hub/models--org--tiny");
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(), COMMIT);
    let weights = std::fs::read(repo().join(FIXTURE).join("model.safetensors")).unwrap();
    let link = std::fs::read_link(repo_dir.join("snapshots").join(COMMIT).join("model.safetensors")).unwrap();
    assert_eq!(link, Path::new("../../blobs").join(sha256_hex(&weights)), "weights are a relative link to the blob named by its sha256");
    assert!(repo_dir.join("snapshots").join(COMMIT).join("config.json").is_file());
    let blobs: Vec<_> = std::fs::read_dir(repo_dir.join("blobs")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(blobs.len(), 2, "only the two blobs, no partial download left: {blobs:?}");
    let seen = hub.seen();
    assert!(seen.iter().all(|s| s.authorization.is_none()), "no token was set, none sent: {seen:?}");
    assert!(seen.iter().any(|s| s.path.starts_with("/cdn/")), "the weights came through the CDN redirect: {seen:?}");

    // Again, online: the Hub is asked which commit main is, nothing is downloaded.
    hub.forget_seen();
    let (code, _, err) = process(&[], &hub.endpoint());
    assert_eq!(code, 0, "{err}");
    assert!(hub.seen().iter().all(|s| s.method == "HEAD"), "up to date: only HEAD requests: {:?}", hub.seen());

    // Offline: not one request.
    hub.forget_seen();
    let (code, _, err) = process(&[("HF_HUB_OFFLINE", "1")], &hub.endpoint());
    assert_eq!(code, 0, "offline: {err}");
    assert!(hub.seen().is_empty(), "HF_HUB_OFFLINE made requests: {:?}", hub.seen());

    // The Hub unreachable: the cached commit is used, with a warning.
    let closed = format!("http://127.0.0.1:{}", crate::common::daemon::free_port());
    let (code, _, err) = process(&[], &closed);
    assert_eq!(code, 0, "unreachable, cached: {err}");
    assert!(err.contains("cannot reach the Hugging Face Hub") && err.contains("using the cached org/tiny@main"), "{err}");

    // Pinned to the commit: served from the cache with no request at all.
    hub.forget_seen();
    let pinned = format!("org/tiny@{COMMIT}");
    let (code, _, err) = roadseg_hub(&hub.endpoint(), &home, &[], &infer_args(&pinned, image(tmp.path()).to_str().unwrap(), tmp.path().join("o.png").to_str().unwrap()));
    assert_eq!(code, 0, "{err}");
    assert!(hub.seen().is_empty(), "a cached commit needs no request: {:?}", hub.seen());
}

#[test]
fn a_private_repo_needs_the_token_which_goes_to_the_hub_only_and_is_never_printed() {
    // Rule: HF_TOKEN (or $HF_HOME/token) is sent as a bearer token to the Hub's own host, never to the CDN, never logged.
    let hub = MockHub::start();
    let mut private = segformer_repo(&repo().join(FIXTURE), COMMIT);
    private.token = Some("hf_secret_123".into());
    hub.add("org/private", private);
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let out = tmp.path().join("out.png");
    let args = infer_args("org/private", img.to_str().unwrap(), out.to_str().unwrap());

    let (code, _, err) = roadseg_hub(&hub.endpoint(), &tmp.path().join("a"), &[], &args);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("no model repo 'org/private'") && err.contains("set HF_TOKEN"), "{err}");

    let (code, _, err) = roadseg_hub(&hub.endpoint(), &tmp.path().join("b"), &[("HF_TOKEN", "hf_wrong")], &args);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("refused the token from $HF_TOKEN") && !err.contains("hf_wrong"), "{err}");

    hub.forget_seen();
    let (code, stdout, err) = roadseg_hub(&hub.endpoint(), &tmp.path().join("c"), &[("HF_TOKEN", "hf_secret_123"), ("ROADSEG_LOG", "trace")], &args);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("hf_secret_123") && !stdout.contains("hf_secret_123"), "the token reached the output");
    for s in hub.seen() {
        let expected = if s.path.starts_with("/cdn/") { None } else { Some("Bearer hf_secret_123".to_string()) };
        assert_eq!(s.authorization, expected, "{s:?}");
    }

    // The token file huggingface-cli login writes.
    let home = tmp.path().join("d");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("token"), "hf_secret_123\n").unwrap();
    let (code, _, err) = roadseg_hub(&hub.endpoint(), &home, &[], &args);
    assert_eq!(code, 0, "token from $HF_HOME/token: {err}");
}

#[test]
fn each_hub_failure_names_its_cause_and_exits_with_its_code() {
    // Rule: a wrong name or access exits 78 (no restart loop); an unreachable Hub or a broken download exits 69 and leaves nothing in the cache.
    let hub = hub_with_tiny();
    let base = segformer_repo(&repo().join(FIXTURE), COMMIT);
    let mut no_weights = base.clone();
    no_weights.files.remove("model.safetensors");
    no_weights.files.insert("pytorch_model.bin".into(), vec![0; 16]);
    hub.add("org/bin-only", no_weights);
    let mut bert = base.clone();
    bert.files.insert("config.json".into(), br#"{"model_type": "bert", "architectures": ["BertModel"]}"#.to_vec());
    hub.add("org/bert", bert);
    for (name, fault) in [("org/corrupt", Fault::CorruptWeights), ("org/truncated", Fault::TruncatedWeights), ("org/gated", Fault::Gated)] {
        hub.add(name, MockRepo { fault, ..base.clone() });
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image(tmp.path());
    let out = tmp.path().join("out.png");
    let closed = format!("http://127.0.0.1:{}", crate::common::daemon::free_port());
    let cases: [(&str, &str, &[(&str, &str)], i32, &[&str]); 10] = [
        ("org/nope", "", &[], 78, &["no model repo 'org/nope'", "check the name"]),
        ("org/nope", "", &[("HF_TOKEN", "hf_any")], 78, &["no model repo 'org/nope'"]),
        ("org/tiny@v9", "", &[], 78, &["has no revision 'v9'"]),
        ("org/bin-only", "", &[], 78, &["has no model.safetensors", "save_pretrained"]),
        ("org/bert", "", &[], 78, &["is not a SegFormer", "\"bert\""]),
        ("org/gated", "", &[], 78, &["is gated", "HF_TOKEN"]),
        ("org/corrupt", "", &[], 69, &["checksum mismatch", "run again"]),
        ("org/truncated", "", &[], 69, &["downloading model.safetensors of org/truncated@main failed"]),
        ("org/tiny", closed.as_str(), &[], 69, &["cannot reach the Hugging Face Hub", "not in the cache"]),
        ("org/tiny", "", &[("HF_HUB_OFFLINE", "1")], 78, &["HF_HUB_OFFLINE is set", "not in the Hugging Face cache", "no refs/main"]),
    ];
    for (i, (model, endpoint, env, want, needles)) in cases.into_iter().enumerate() {
        let endpoint = if endpoint.is_empty() { hub.endpoint() } else { endpoint.to_string() };
        let home = tmp.path().join(format!("home{i}"));
        let (code, _, err) = roadseg_hub(&endpoint, &home, env, &infer_args(model, img.to_str().unwrap(), out.to_str().unwrap()));
        assert_eq!(code, want, "{model} {env:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{model} {env:?}: no '{n}' in: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        let blobs = home.join("hub").join(format!("models--{}", model.split('@').next().unwrap().replace('/', "--"))).join("blobs");
        let weights_blob = std::fs::read_dir(&blobs).into_iter().flatten().flatten().any(|e| {
            let f = e.file_name();
            let f = f.to_string_lossy();
            f.len() == 64 || f.contains(".incomplete")
        });
        assert!(!weights_blob, "{model}: a broken or refused download left weights in {}", blobs.display());
    }
}

#[test]
fn check_config_and_the_running_daemon_say_which_hub_commit_the_model_is() {
    // Rule: `[model] path = "org/name@rev"` is fetched by check-config and run; both, and /api/v1/streams, name repo, revision and commit.
    use crate::common::daemon::{self, Daemon, free_port, get};
    use std::time::Duration;
    let hub = hub_with_tiny();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("hf");
    let (metrics, rtsp) = (free_port(), free_port());
    let header = daemon::header(metrics, rtsp).replace(&format!("{:?}", daemon::model().display().to_string()), "\"org/tiny@v1\"");
    assert!(header.contains("path = \"org/tiny@v1\""), "{header}");
    let config = tmp.path().join("roadseg.toml");
    std::fs::write(&config, header + &daemon::test_stream("cam", &format!("stats = {:?}", tmp.path().join("cam.jsonl").display().to_string()))).unwrap();

    let (code, stdout, err) = roadseg_hub(&hub.endpoint(), &home, &[], &["check-config", config.to_str().unwrap(), "--no-estimate"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains(&format!("from the Hugging Face Hub: org/tiny revision v1, commit {COMMIT}")), "{stdout}");
    assert!(std::fs::read_to_string(home.join("hub/models--org--tiny/refs/v1")).unwrap() == COMMIT, "a tag gets its ref too");

    let log = tmp.path().join("daemon.log");
    let mut d = Daemon::start_with_env(&config, &log, &[
        ("HF_ENDPOINT", hub.endpoint().as_str()),
        ("HF_HOME", home.to_str().unwrap()),
        ("HF_HUB_OFFLINE", "1"),
    ]);
    let mut api = String::new();
    d.wait_for("the API to name the model", Duration::from_secs(30), || {
        api = get(metrics, "/api/v1/streams");
        api.contains("\"commit\"")
    });
    let body: serde_json::Value = serde_json::from_str(&api[api.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    let m = &body["model"];
    assert_eq!((m["source"].as_str(), m["repo"].as_str(), m["revision"].as_str(), m["commit"].as_str()), (Some("hub"), Some("org/tiny"), Some("v1"), Some(COMMIT)), "{body}");
    d.stop_cleanly();
}
