//! The two Hub requests roadseg makes, as `huggingface_hub` makes them:
//! `HEAD {endpoint}/{repo}/resolve/{revision}/{file}` for the commit, the
//! ETag (a checksum) and the size; then a `GET` of the file, which the Hub
//! usually redirects to its CDN. Redirects are followed here, not by the
//! HTTP client, so that the token only ever goes to the Hub itself.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha1::Digest;
use ureq::Agent;
use ureq::http::HeaderMap;

use super::error::HubError;
use super::progress::Progress;
use super::settings::HubSettings;
use super::HubModelId;

const USER_AGENT: &str = concat!("roadseg/", env!("CARGO_PKG_VERSION"));
const MAX_REDIRECTS: usize = 8;
const CHUNK: usize = 256 * 1024;

/// What the Hub says about one file at one revision.
#[derive(Clone, Debug)]
pub(super) struct FileMeta {
    pub commit: String,
    /// The ETag, quotes and `W/` removed: the sha256 of an LFS file, the git
    /// blob sha1 of any other.
    pub etag: String,
    pub size: Option<u64>,
    /// Where the bytes are: the CDN's URL when the Hub redirects there.
    pub url: String,
}

pub(super) struct Client<'a> {
    agent: Agent,
    settings: &'a HubSettings,
    /// For messages: the model and the cache it was not found in.
    model: String,
    cache: String,
}

impl<'a> Client<'a> {
    pub fn new(settings: &'a HubSettings, id: &HubModelId, cache: &Path) -> Client<'a> {
        let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::PlatformVerifier).build();
        let config = Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(USER_AGENT)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            // A stalled download fails instead of hanging a daemon's start.
            .timeout_per_read(Some(Duration::from_secs(60)))
            .build();
        Client { agent: Agent::new_with_config(config), settings, model: id.to_string(), cache: cache.display().to_string() }
    }

    /// The file's metadata, or why the Hub will not give it.
    pub fn head(&self, id: &HubModelId, revision: &str, file: &str) -> Result<FileMeta, HubError> {
        let endpoint = &self.settings.endpoint;
        let mut url = format!("{endpoint}/{}/resolve/{}/{file}", id.repo, encode(revision));
        for _ in 0..MAX_REDIRECTS {
            let mut request = self.agent.head(&url).header("Accept-Encoding", "identity");
            if let Some(auth) = self.authorization(&url) {
                request = request.header("Authorization", auth);
            }
            let response = request.call().map_err(|e| self.unreachable(&e))?;
            let (status, headers) = (response.status().as_u16(), response.headers());
            match (status, header(headers, "location")) {
                // A renamed repo: the Hub points at its new name on the same host.
                (300..=399, Some(loc)) if loc.starts_with('/') => url = format!("{endpoint}{loc}"),
                // The bytes are elsewhere (the CDN); the metadata is in this answer.
                (300..=399, Some(loc)) => return self.meta(headers, loc.to_string()),
                (200..=299, _) => return self.meta(headers, url),
                _ => return Err(self.status_error(status, headers, id, revision, file)),
            }
        }
        Err(self.unreachable_because(format!("more than {MAX_REDIRECTS} redirects, the last to {url}")))
    }

    /// Downloads `meta.url` into `dest`, checking its size and checksum.
    pub fn download(&self, meta: &FileMeta, file: &str, dest: &Path) -> Result<(), HubError> {
        let broken = |reason: String| HubError::BrokenDownload { file: file.into(), model: self.model.clone(), reason };
        let mut url = meta.url.clone();
        let mut response = None;
        for _ in 0..MAX_REDIRECTS {
            let mut request = self.agent.get(&url).header("Accept-Encoding", "identity");
            if let Some(auth) = self.authorization(&url) {
                request = request.header("Authorization", auth);
            }
            let r = request.call().map_err(|e| broken(format!("{e} (from {})", host_of(&url))))?;
            let status = r.status().as_u16();
            match header(r.headers(), "location") {
                Some(loc) if (300..=399).contains(&status) => {
                    url = if loc.starts_with('/') { format!("{}{loc}", origin_of(&url)) } else { loc.to_string() };
                }
                _ if status == 200 => {
                    response = Some(r);
                    break;
                }
                _ => return Err(broken(format!("HTTP {status} from {}", host_of(&url)))),
            }
        }
        let mut response = response.ok_or_else(|| broken(format!("more than {MAX_REDIRECTS} redirects")))?;
        let total = meta.size.or(response.body().content_length());
        let cache_error = |err| HubError::Cache { path: dest.to_path_buf(), err };
        let mut out = std::fs::File::create(dest).map_err(cache_error)?;
        let mut reader = response.body_mut().with_config().limit(u64::MAX).reader();
        let mut sha256 = sha2::Sha256::new();
        let mut progress = Progress::new(file, &self.model, total);
        let mut buf = vec![0u8; CHUNK];
        let mut got: u64 = 0;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    progress.abandon();
                    return Err(broken(format!("the connection broke after {} ({e})", progress.amount())));
                }
            };
            out.write_all(&buf[..n]).map_err(cache_error)?;
            sha256.update(&buf[..n]);
            got += n as u64;
            progress.advance(n as u64);
        }
        out.sync_all().map_err(cache_error)?;
        drop(out);
        if let Some(total) = total.filter(|&t| t != got) {
            progress.abandon();
            return Err(broken(format!("the Hub announced {total} bytes and {got} arrived")));
        }
        let actual = match meta.etag.len() {
            64 => Some(hex(&sha256.finalize())),
            40 => Some(git_blob_sha1(dest, got).map_err(cache_error)?),
            _ => None,
        };
        match actual {
            Some(actual) if actual != meta.etag => {
                progress.abandon();
                return Err(broken(format!("checksum mismatch: the Hub's ETag is {} and the bytes hash to {actual}", meta.etag)));
            }
            Some(_) => {}
            None => tracing::debug!(file, etag = %meta.etag, "the ETag is not a checksum; only the size was checked"),
        }
        progress.finish();
        Ok(())
    }

    /// The token, only for the Hub's own origin (never a CDN it redirects to).
    fn authorization(&self, url: &str) -> Option<String> {
        let token = self.settings.token.as_ref()?;
        let endpoint = &self.settings.endpoint;
        let own = url.strip_prefix(endpoint.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        own.then(|| format!("Bearer {}", token.value()))
    }

    fn meta(&self, headers: &HeaderMap, url: String) -> Result<FileMeta, HubError> {
        let not_a_hub = || HubError::NotAHub { endpoint: self.settings.endpoint.clone() };
        let commit = header(headers, "x-repo-commit").ok_or_else(not_a_hub)?.to_string();
        let etag = header(headers, "x-linked-etag").or_else(|| header(headers, "etag")).ok_or_else(not_a_hub)?;
        let etag = etag.trim_start_matches("W/").trim_matches('"').to_string();
        let size = header(headers, "x-linked-size").or_else(|| header(headers, "content-length")).and_then(|s| s.parse().ok());
        Ok(FileMeta { commit, etag, size, url })
    }

    fn unreachable(&self, e: &ureq::Error) -> HubError {
        self.unreachable_because(e.to_string())
    }

    fn unreachable_because(&self, reason: String) -> HubError {
        HubError::Unreachable {
            endpoint: self.settings.endpoint.clone(),
            reason,
            model: self.model.clone(),
            cache: self.cache.clone(),
        }
    }

    fn status_error(&self, status: u16, headers: &HeaderMap, id: &HubModelId, revision: &str, file: &str) -> HubError {
        let code = header(headers, "x-error-code").unwrap_or("");
        let (repo, endpoint) = (id.repo.clone(), self.settings.endpoint.clone());
        let token = self.settings.token.as_ref();
        let token_sent = token.is_some();
        let model = format!("{}@{revision}", id.repo);
        match (status, code) {
            (_, "GatedRepo") | (403, _) => HubError::Gated { repo, endpoint, token_sent },
            (_, "RevisionNotFound") => HubError::RevisionNotFound { repo, revision: revision.into() },
            (_, "EntryNotFound") if file == "config.json" => HubError::NoConfig { model },
            (_, "EntryNotFound") => HubError::NoSafetensors { model, repo },
            (401, c) if c != "RepoNotFound" && token_sent => {
                HubError::TokenRefused { repo, endpoint, token_source: token.map(|t| t.source.clone()).unwrap_or_default() }
            }
            (401 | 404, _) => HubError::RepoNotFound { repo, endpoint, token_sent },
            _ => HubError::Server { status, what: format!("{file} of {model}") },
        }
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A revision as one URL path segment (`refs/pr/1` -> `refs%2Fpr%2F1`).
fn encode(revision: &str) -> String {
    revision
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    url[after_scheme..].find('/').map_or(url, |i| &url[..after_scheme + i])
}

/// The host part, for messages (a CDN URL's query holds signatures).
fn host_of(url: &str) -> &str {
    let origin = origin_of(url);
    origin.find("://").map_or(origin, |i| &origin[i + 3..])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// git's object id of a file: sha1 of `blob <len>\0` and the contents,
/// which is the ETag the Hub gives a file not kept in LFS.
fn git_blob_sha1(path: &Path, len: u64) -> std::io::Result<String> {
    let mut sha1 = sha1::Sha1::new();
    sha1.update(format!("blob {len}\0").as_bytes());
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha1.update(&buf[..n]);
    }
    Ok(hex(&sha1.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_and_checksums_match_git_and_the_hub() {
        // Rule: revisions are one path segment; the token's origin test and git's blob id match what the Hub uses.
        assert_eq!(encode("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode("main"), "main");
        assert_eq!(origin_of("https://cdn-lfs.hf.co/repos/a/b?X-Amz=1"), "https://cdn-lfs.hf.co");
        assert_eq!(host_of("http://127.0.0.1:8080/x"), "127.0.0.1:8080");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "hello\n").unwrap();
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(git_blob_sha1(&path, 6).unwrap(), "ce013625030ba8dba906f756967f9e9ca394464a");
        let settings = HubSettings {
            endpoint: "https://huggingface.co".into(),
            cache: None,
            token: Some(super::super::settings::Token::for_tests("hf_x")),
            offline: false,
        };
        let id = HubModelId::parse("org/name").unwrap();
        let client = Client::new(&settings, &id, dir.path());
        assert_eq!(client.authorization("https://huggingface.co/org/name/resolve/main/config.json").as_deref(), Some("Bearer hf_x"));
        assert_eq!(client.authorization("https://huggingface.co.evil.example/x"), None);
        assert_eq!(client.authorization("https://cdn-lfs.huggingface.co/x"), None);
    }
}
