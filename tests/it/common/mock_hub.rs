//! A stand-in for the Hugging Face Hub on loopback, speaking the part of its
//! HTTP API that `huggingface_hub` and roadseg use: `HEAD`/`GET
//! /{org}/{name}/resolve/{revision}/{file}` with `X-Repo-Commit`, `ETag`,
//! `X-Error-Code`, and LFS files redirected to a "CDN" path with
//! `X-Linked-Etag` (sha256) and `X-Linked-Size`. Every request is recorded
//! so tests can check what was asked, and with which credentials.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha1::Digest;

/// How a repo misbehaves, to test each failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// The CDN sends the weights with one byte changed.
    CorruptWeights,
    /// The CDN announces the full size, sends half and closes.
    TruncatedWeights,
    /// Access needs accepted conditions (403 GatedRepo).
    Gated,
}

#[derive(Clone, Debug)]
pub struct MockRepo {
    pub commit: String,
    /// Revision names (branches, tags) that point at `commit`.
    pub refs: Vec<String>,
    pub files: HashMap<String, Vec<u8>>,
    /// Only this bearer token may read it (a private repo).
    pub token: Option<String>,
    pub fault: Fault,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
}

pub struct MockHub {
    pub port: u16,
    repos: Arc<Mutex<HashMap<String, MockRepo>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

pub fn git_sha1_hex(bytes: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A SegFormer checkpoint as a Hub repo: `dir`'s files, its labels renamed
/// to Cityscapes' (road first) so the road class is found by name.
pub fn segformer_repo(dir: &Path, commit: &str) -> MockRepo {
    const CITYSCAPES: [&str; 19] = [
        "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign", "vegetation", "terrain", "sky",
        "person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle",
    ];
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let n = config["id2label"].as_object().unwrap().len();
    let labels: serde_json::Map<String, serde_json::Value> = (0..n).map(|i| (i.to_string(), CITYSCAPES[i].into())).collect();
    config["id2label"] = labels.into();
    let files = HashMap::from([
        ("config.json".to_string(), serde_json::to_vec_pretty(&config).unwrap()),
        ("model.safetensors".to_string(), std::fs::read(dir.join("model.safetensors")).unwrap()),
    ]);
    MockRepo { commit: commit.into(), refs: vec!["main".into()], files, token: None, fault: Fault::None }
}

impl MockHub {
    /// The Hub on one port and its "CDN" on another: a different origin,
    /// as in production, so the token's scope can be checked.
    pub fn start() -> MockHub {
        let hub = TcpListener::bind("127.0.0.1:0").unwrap();
        let cdn = TcpListener::bind("127.0.0.1:0").unwrap();
        let (port, cdn_port) = (hub.local_addr().unwrap().port(), cdn.local_addr().unwrap().port());
        let repos: Arc<Mutex<HashMap<String, MockRepo>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = [hub, cdn]
            .into_iter()
            .map(|listener| {
                listener.set_nonblocking(true).unwrap();
                let (repos, seen, stop) = (repos.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match listener.accept() {
                            Ok((conn, _)) => {
                                let (repos, seen) = (repos.clone(), seen.clone());
                                std::thread::spawn(move || serve(conn, cdn_port, &repos, &seen));
                            }
                            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                        }
                    }
                })
            })
            .collect();
        MockHub { port, repos, seen, stop, threads }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn add(&self, name: &str, repo: MockRepo) {
        self.repos.lock().unwrap().insert(name.into(), repo);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn forget_seen(&self) {
        self.seen.lock().unwrap().clear();
    }
}

impl Drop for MockHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close (a broken transfer).
    cut_at: Option<usize>,
}

fn answer(status: u16, headers: &[(&str, String)], body: Vec<u8>) -> Answer {
    Answer { status, headers: headers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), body, cut_at: None }
}

fn error(status: u16, code: &str) -> Answer {
    let mut a = answer(status, &[("X-Error-Message", format!("{code} (mock)"))], Vec::new());
    if !code.is_empty() {
        a.headers.push(("X-Error-Code".into(), code.into()));
    }
    a
}

fn serve(conn: TcpStream, cdn_port: u16, repos: &Mutex<HashMap<String, MockRepo>>, seen: &Mutex<Vec<Seen>>) {
    conn.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut authorization = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("authorization") {
                authorization = Some(v.trim().to_string());
            }
        }
    }
    seen.lock().unwrap().push(Seen { method: method.clone(), path: path.clone(), authorization: authorization.clone() });
    let a = route(&method, &path, authorization.as_deref(), cdn_port, &repos.lock().unwrap());
    let mut conn = conn;
    let mut head = format!("HTTP/1.1 {} Mock\r\nConnection: close\r\n", a.status);
    let announces_length = a.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    for (k, v) in &a.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !announces_length {
        head.push_str(&format!("Content-Length: {}\r\n", a.body.len()));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    if method != "HEAD" {
        let body = &a.body[..a.cut_at.unwrap_or(a.body.len())];
        let _ = conn.write_all(body);
    }
    let _ = conn.flush();
}

fn route(method: &str, path: &str, auth: Option<&str>, cdn_port: u16, repos: &HashMap<String, MockRepo>) -> Answer {
    // The CDN: /cdn/{org}/{name}/{sha256}; it never asks for (nor should get) a token.
    if let Some(rest) = path.strip_prefix("/cdn/") {
        let Some((name, sha)) = rest.rsplit_once('/') else { return error(404, "") };
        let Some((repo, bytes)) = repos.get(name).and_then(|r| r.files.values().find(|b| sha256_hex(b) == sha).map(|b| (r, b.clone()))) else {
            return error(404, "");
        };
        let mut a = answer(200, &[], bytes);
        match repo.fault {
            Fault::CorruptWeights => a.body[100] ^= 0x55,
            Fault::TruncatedWeights => {
                a.headers.push(("Content-Length".into(), a.body.len().to_string()));
                a.cut_at = Some(a.body.len() / 2);
            }
            _ => {}
        }
        return a;
    }
    let segs: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    if segs.len() != 5 || segs[2] != "resolve" || !(method == "HEAD" || method == "GET") {
        return error(404, "");
    }
    let (name, revision, file) = (format!("{}/{}", segs[0], segs[1]), segs[3].replace("%2F", "/"), segs[4]);
    let token_ok = |repo: &MockRepo| repo.token.as_ref().is_none_or(|t| auth == Some(format!("Bearer {t}").as_str()));
    let Some(repo) = repos.get(&name).filter(|r| r.token.is_none() || auth.is_some()) else {
        // As the Hub: without a token, a missing and a private repo look alike (401).
        return if auth.is_some() { error(404, "RepoNotFound") } else { error(401, "RepoNotFound") };
    };
    if !token_ok(repo) {
        return error(401, "");
    }
    if repo.fault == Fault::Gated {
        return error(403, "GatedRepo");
    }
    if revision != repo.commit && !repo.refs.contains(&revision) {
        return error(404, "RevisionNotFound");
    }
    let Some(bytes) = repo.files.get(file) else { return error(404, "EntryNotFound") };
    let commit = ("X-Repo-Commit", repo.commit.clone());
    if file.ends_with(".safetensors") {
        // LFS: the Hub redirects to its CDN; the checksum is the sha256.
        let sha = sha256_hex(bytes);
        return answer(302, &[
            commit,
            ("Location", format!("http://127.0.0.1:{cdn_port}/cdn/{name}/{sha}")),
            ("X-Linked-Etag", format!("\"{sha}\"")),
            ("X-Linked-Size", bytes.len().to_string()),
            ("ETag", "\"not-the-checksum\"".into()),
        ], Vec::new());
    }
    let mut a = answer(200, &[commit, ("ETag", format!("\"{}\"", git_sha1_hex(bytes)))], bytes.clone());
    if method == "HEAD" {
        a.headers.push(("Content-Length".into(), bytes.len().to_string()));
    }
    a
}
