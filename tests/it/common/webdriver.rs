//! Headless Chromium driven through chromedriver's WebDriver HTTP API, for
//! what a one-shot `chromium --dump-dom` cannot show: a page watched over
//! real seconds (a video playing), scripts run in it, screenshots.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A chromedriver and one headless browser session; both end on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    /// Err (the reason, to skip on) when chromedriver is not installed; a
    /// driver or browser that is there but fails panics.
    pub fn start() -> Result<Browser, String> {
        let port = super::daemon::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run chromedriver ({e}); tools/install-test-deps.sh installs chromium-driver"))?;
        let mut b = Browser { driver, port, session: String::new() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen within 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--autoplay-policy=no-user-gesture-required",
            "--window-size=1280,720",
            "--hide-scrollbars",
        ];
        let created = b
            .call("POST", "/session", Some(json!({ "capabilities": { "alwaysMatch": { "goog:chromeOptions": { "args": args } } } })))
            .unwrap_or_else(|e| panic!("chromedriver could not start a headless Chromium: {e}"));
        b.session = created["sessionId"].as_str().unwrap_or_else(|| panic!("no session from chromedriver: {created}")).to_string();
        Ok(b)
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        // A cold browser start on a busy 2-core machine can take a while.
        s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open: read the head, then Content-Length bytes.
        let mut raw = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        let (head, body) = loop {
            let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                let text = String::from_utf8_lossy(&raw).into_owned();
                let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("a bad reply from chromedriver: {text}"))?;
                break (head.to_ascii_lowercase(), body.to_string());
            }
            raw.extend_from_slice(&chunk[..n]);
            let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse::<usize>().ok());
            if let Some(length) = length
                && raw.len() >= split + 4 + length
            {
                break (head, String::from_utf8_lossy(&raw[split + 4..split + 4 + length]).into_owned());
            }
        };
        let body = if head.contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if v["value"]["error"].is_string() {
            return Err(format!("{method} {path}: {}", v["value"]));
        }
        Ok(v["value"].clone())
    }

    pub fn open(&self, url: &str) -> Result<(), String> {
        self.call("POST", &format!("/session/{}/url", self.session), Some(json!({ "url": url }))).map(drop)
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub fn eval(&self, script: &str) -> Result<Value, String> {
        self.call("POST", &format!("/session/{}/execute/sync", self.session), Some(json!({ "script": script, "args": [] })))
    }

    /// The visible page as PNG.
    pub fn screenshot(&self) -> Result<Vec<u8>, String> {
        use base64::Engine;
        let png = self.call("GET", &format!("/session/{}/screenshot", self.session), None)?;
        base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap_or_default()).map_err(|e| e.to_string())
    }

    /// Closes the browser (its connections with it); the driver stays until drop.
    pub fn close(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
            self.session.clear();
        }
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.close();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
