//! A deliberately tiny HTTP/1.1 server for /metrics, /healthz and /readyz:
//! one thread, one request per connection, no async runtime. Scrapers and
//! probes send a handful of requests a minute; simplicity beats throughput.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::health::Health;
use super::metrics::PrometheusHandle;

/// Whole-request budget: a client that trickles bytes cannot hold the
/// (single) serving thread for longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);
const MAX_HEAD: usize = 8 * 1024;
/// How long to wait for a client to close after its response was sent.
const LINGER: Duration = Duration::from_millis(250);
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr} (metrics.listen): {err}")]
    Bind { addr: SocketAddr, err: io::Error },
    #[error("cannot start the metrics HTTP thread: {0}")]
    Thread(io::Error),
}

pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Binds `addr` (port 0 picks a free one) and serves until `shutdown()`
    /// or drop.
    pub fn start(addr: SocketAddr, handle: PrometheusHandle, health: Arc<Health>) -> Result<HttpServer, HttpError> {
        let bind = |err| HttpError::Bind { addr, err };
        let listener = TcpListener::bind(addr).map_err(bind)?;
        // Non-blocking so the loop can notice `stop` without a wake-up connection.
        listener.set_nonblocking(true).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let routes = Routes { handle, health };
        let thread = std::thread::Builder::new()
            .name("roadseg-http".into())
            .spawn(move || accept_loop(&listener, &flag, &routes))
            .map_err(HttpError::Thread)?;
        tracing::info!(addr = %local, "serving /metrics, /healthz and /readyz");
        Ok(HttpServer { addr: local, stop, thread: Some(thread) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the thread: at most one poll interval plus
    /// the request in progress (bounded by the 2 s request timeout).
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the metrics HTTP thread panicked");
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

struct Routes {
    handle: PrometheusHandle,
    health: Arc<Health>,
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool, routes: &Routes) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = serve(stream, routes) {
                    tracing::debug!(%peer, "HTTP request failed: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // E.g. out of file descriptors: back off rather than spin.
                tracing::warn!("metrics HTTP accept failed: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
}

struct Response {
    status: &'static str,
    content_type: &'static str,
    extra_header: Option<&'static str>,
    body: String,
}

impl Response {
    fn text(status: &'static str, body: impl Into<String>) -> Response {
        Response { status, content_type: "text/plain; charset=utf-8", extra_header: None, body: body.into() }
    }
}

fn serve(mut stream: TcpStream, routes: &Routes) -> io::Result<()> {
    // Accepted sockets may inherit non-blocking mode on some platforms.
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let (response, head_only) = match read_head(&mut stream)? {
        Some(head) => respond(&head, routes),
        None => (Response::text("431 Request Header Fields Too Large", "request head too large\n"), false),
    };
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    if let Some(h) = response.extra_header {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&response.body);
    }
    stream.write_all(out.as_bytes())?;
    stream.flush()?;
    linger(stream);
    Ok(())
}

/// Closing with unread input makes the kernel send a reset, which can destroy
/// the response before the client reads it (e.g. after a 431 or a POST
/// body). So: half-close, then discard what the client still sends, briefly.
fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < 64 * 1024 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// The request line and headers, or `None` when they exceed `MAX_HEAD`.
/// A body, if any, is never read: none of the routes takes one.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request head not received in time"));
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the request head ended"));
        }
        head.extend_from_slice(&buf[..n]);
        match head.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(end) if end <= MAX_HEAD => {
                head.truncate(end);
                return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
            }
            Some(_) => return Ok(None),
            None if head.len() > MAX_HEAD => return Ok(None),
            None => {}
        }
    }
}

/// The response, and whether to leave its body out (HEAD).
fn respond(head: &str, routes: &Routes) -> (Response, bool) {
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return (Response::text("400 Bad Request", "malformed request line\n"), false);
    };
    if !version.starts_with("HTTP/1.") {
        return (Response::text("505 HTTP Version Not Supported", "HTTP/1.x only\n"), false);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return (Response::text("404 Not Found", "not found; try /metrics, /healthz or /readyz\n"), false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let mut r = Response::text("405 Method Not Allowed", "only GET and HEAD\n");
        r.extra_header = Some("Allow: GET, HEAD");
        return (r, false);
    }
    let response = match path {
        "/metrics" => Response { status: "200 OK", content_type: METRICS_TYPE, extra_header: None, body: routes.handle.render() },
        "/healthz" => Response::text("200 OK", "ok\n"),
        _ => match routes.health.is_ready() {
            (true, reason) => Response::text("200 OK", format!("{reason}\n")),
            (false, reason) => Response::text("503 Service Unavailable", format!("{reason}\n")),
        },
    };
    (response, head_only)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::daemon::metrics::{self, StreamMetrics};

    fn start(health: Arc<Health>) -> HttpServer {
        let handle = metrics::install().unwrap();
        HttpServer::start((Ipv4Addr::LOCALHOST, 0).into(), handle, health).unwrap()
    }

    /// Sends `request` raw and returns (status line, body).
    fn send(addr: SocketAddr, request: &str) -> (String, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (head.lines().next().unwrap_or("").to_string(), body.to_string())
    }

    fn get(addr: SocketAddr, path: &str) -> (String, String) {
        send(addr, &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"))
    }

    #[test]
    fn metrics_endpoint_shows_recorded_counters() {
        // Rule: GET /metrics renders the Prometheus text, including counters we incremented.
        let server = start(Arc::new(Health::new()));
        StreamMetrics::new("http-test").frames_inferred.increment(7);
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Type: text/plain; version=0.0.4"), "{text}");
        assert!(text.contains("roadseg_frames_inferred_total{stream=\"http-test\"} 7"), "{text}");
        server.shutdown();
    }

    #[test]
    fn readyz_flips_from_503_to_200() {
        // Rule: /readyz is 503 with a reason until the model is loaded and every stream is up; /healthz is always 200.
        let health = Arc::new(Health::new());
        let server = start(health.clone());
        let addr = server.local_addr();
        health.add_stream("http-ready");
        assert_eq!(get(addr, "/readyz"), ("HTTP/1.1 503 Service Unavailable".into(), "model not loaded\n".into()));
        assert_eq!(get(addr, "/healthz"), ("HTTP/1.1 200 OK".into(), "ok\n".into()));
        health.set_model_loaded(true);
        assert_eq!(get(addr, "/readyz").1, "stream(s) down: http-ready\n");
        health.set_stream_up("http-ready", true);
        let (status, body) = get(addr, "/readyz?verbose=1");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    }

    #[test]
    fn unknown_paths_and_methods_are_refused() {
        // Rule: 404 for other paths, 405 (with Allow) for non-GET, HEAD has no body, garbage is 400.
        let server = start(Arc::new(Health::new()));
        let addr = server.local_addr();
        assert_eq!(get(addr, "/").0, "HTTP/1.1 404 Not Found");
        assert_eq!(send(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0, "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(send(addr, "HEAD /healthz HTTP/1.1\r\n\r\n"), ("HTTP/1.1 200 OK".into(), String::new()));
        assert_eq!(send(addr, "hello\r\n\r\n").0, "HTTP/1.1 400 Bad Request");
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD + 10));
        assert_eq!(send(addr, &huge).0, "HTTP/1.1 431 Request Header Fields Too Large");
    }

    #[test]
    fn a_silent_client_cannot_block_the_server() {
        // Rule: a connection that sends nothing is dropped after the request timeout, and others are then served.
        let server = start(Arc::new(Health::new()));
        let addr = server.local_addr();
        let _silent = TcpStream::connect(addr).unwrap();
        std::thread::sleep(POLL * 3); // let the server pick the silent one first
        let t = Instant::now();
        assert_eq!(get(addr, "/healthz").0, "HTTP/1.1 200 OK");
        assert!(t.elapsed() < REQUEST_TIMEOUT + Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn shutdown_is_prompt_and_frees_the_port() {
        // Rule: shutdown() returns within a poll interval or so and closes the listener.
        let server = start(Arc::new(Health::new()));
        let addr = server.local_addr();
        let t = Instant::now();
        server.shutdown();
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn bind_errors_name_the_address() {
        // Rule: a port in use is an error naming the address.
        let server = start(Arc::new(Health::new()));
        let addr = server.local_addr();
        let handle = metrics::install().unwrap();
        let e = HttpServer::start(addr, handle, Arc::new(Health::new())).err().expect("second bind must fail");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
