//! The daemon's HTTP endpoint: /metrics, /healthz, /readyz, the status page
//! `/` and the JSON API under `/api/v1/`.
//!
//! hyper serves each connection as its own task on a small tokio runtime
//! (two threads) owned by [`WebServer`], so a client that connects and sends
//! nothing costs one idle task and holds nobody else up. Limits: the request
//! head must arrive within [`HEAD_TIMEOUT`] and fit in [`MAX_HEAD`] bytes
//! (else the connection is closed, or answered 431), a handler gets [`REQUEST_TIMEOUT`], a
//! connection lives at most [`CONNECTION_LIFETIME`] (slow readers), and at
//! most [`MAX_CONNECTIONS`] are open at once (more are closed on accept).

mod api;
mod auth;
mod mjpeg;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

use super::health::Health;
use super::metrics::PrometheusHandle;
use super::status::StreamDirectory;

pub use auth::Credentials;

/// Time for a client to send a whole request head, counted from the
/// connection's start or the previous response (idle keep-alive included).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a handler to answer (a snapshot's encoding included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed after this however busy: bounds slow readers.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
pub const MAX_CONNECTIONS: usize = 256;
/// Request line and headers; hyper answers 431 beyond it.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long shutdown waits for requests in progress.
const DRAIN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("cannot listen on {addr} (metrics.listen): {err}")]
    Bind { addr: SocketAddr, err: std::io::Error },
    #[error("cannot start the HTTP runtime: {0}")]
    Runtime(std::io::Error),
}

/// What the routes read.
#[derive(Clone)]
pub struct WebContext {
    pub metrics: PrometheusHandle,
    pub health: Arc<Health>,
    pub streams: Arc<StreamDirectory>,
    /// Basic auth for everything but the probes; None serves openly.
    pub credentials: Option<Credentials>,
}

pub struct WebServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl WebServer {
    /// Binds `addr` (port 0 picks a free one) and serves until `shutdown()`
    /// or drop.
    pub fn start(addr: SocketAddr, ctx: WebContext) -> Result<WebServer, WebError> {
        let bind = |err| WebError::Bind { addr, err };
        // Bound here, synchronously, so a taken port is the caller's error.
        let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .thread_name("roadseg-http")
            .enable_io()
            .enable_time()
            .build()
            .map_err(WebError::Runtime)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind)?
        };
        let authenticated = ctx.credentials.is_some();
        let router = routes::router(ctx);
        let (stop, stopped) = watch::channel(false);
        let accept = runtime.spawn(accept_loop(listener, router, stopped));
        tracing::info!(addr = %local, authenticated, "serving the status page, /api/v1/streams, /metrics, /healthz and /readyz");
        Ok(WebServer { addr: local, stop, runtime: Some(runtime), accept: Some(accept) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in progress finish (up to a second)
    /// and stops the runtime.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.send(true);
        if let (Some(runtime), Some(accept)) = (self.runtime.take(), self.accept.take()) {
            let _ = runtime.block_on(async { tokio::time::timeout(DRAIN * 2, accept).await });
            runtime.shutdown_timeout(DRAIN);
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, router: axum::Router, mut stopped: watch::Receiver<bool>) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_buf_size(MAX_HEAD);
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // E.g. out of file descriptors: back off rather than spin.
                    tracing::warn!("HTTP accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "HTTP connection refused: {MAX_CONNECTIONS} already open");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                Ok(Err(e)) => tracing::debug!(%peer, "HTTP connection ended: {e}"),
                Err(_) => tracing::debug!(%peer, "HTTP connection closed after {} s", CONNECTION_LIFETIME.as_secs()),
                Ok(Ok(())) => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::debug!("HTTP connections still open at shutdown were dropped");
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpStream};

    use super::*;
    use crate::daemon::metrics::{self, StreamMetrics};
    use crate::daemon::status::StreamStatus;

    fn start(health: Arc<Health>, streams: Arc<StreamDirectory>) -> WebServer {
        let ctx = WebContext { metrics: metrics::install().unwrap(), health, streams, credentials: None };
        WebServer::start((Ipv4Addr::LOCALHOST, 0).into(), ctx).unwrap()
    }

    /// (status line, body) of a GET.
    fn get(addr: SocketAddr, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (head.lines().next().unwrap_or("").to_string(), body.to_string())
    }

    #[test]
    fn readyz_flips_from_503_to_200_and_metrics_show_counters() {
        // Rule: /readyz is 503 with a reason until the model is loaded and every stream is up; /healthz is always 200; /metrics renders what was counted.
        let health = Arc::new(Health::new());
        let server = start(health.clone(), Arc::default());
        let addr = server.local_addr();
        health.add_stream("web-ready");
        assert_eq!(get(addr, "/readyz"), ("HTTP/1.1 503 Service Unavailable".into(), "model not loaded\n".into()));
        assert_eq!(get(addr, "/healthz"), ("HTTP/1.1 200 OK".into(), "ok\n".into()));
        health.set_model_loaded(true);
        assert_eq!(get(addr, "/readyz").1, "stream(s) down: web-ready\n");
        health.set_stream_up("web-ready", true);
        assert_eq!(get(addr, "/readyz?verbose=1").0, "HTTP/1.1 200 OK");
        StreamMetrics::new("web-test").frames_inferred.increment(7);
        assert!(get(addr, "/metrics").1.contains("roadseg_frames_inferred_total{stream=\"web-test\"} 7"));
        server.shutdown();
    }

    #[test]
    fn snapshots_are_404_for_unknown_streams_and_503_before_a_frame() {
        // Rule: snapshot.jpg names an unknown stream in a 404 and says 503 until the stream has an annotated frame.
        let streams = Arc::new(StreamDirectory::new());
        streams.insert(Arc::new(StreamStatus::new("early", "test://smpte".into(), true, StreamMetrics::new("early"))));
        let server = start(Arc::new(Health::new()), streams);
        let (status, body) = get(server.local_addr(), "/api/v1/streams/nope/snapshot.jpg");
        assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 404 Not Found", "no stream named 'nope'\n"));
        assert_eq!(get(server.local_addr(), "/api/v1/streams/early/snapshot.jpg").0, "HTTP/1.1 503 Service Unavailable");
        let (status, body) = get(server.local_addr(), "/api/v1/streams");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("\"state\":\"starting\""), "{body}");
    }

    #[test]
    fn shutdown_does_not_wait_for_idle_connections_and_frees_the_port() {
        // Rule: shutdown() returns with an idle connection still open (it does not wait out the head timeout) and closes the listener.
        let server = start(Arc::new(Health::new()), Arc::default());
        let addr = server.local_addr();
        let _idle = TcpStream::connect(addr).unwrap();
        server.shutdown();
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn bind_errors_name_the_address() {
        // Rule: a port in use is an error naming the address.
        let server = start(Arc::new(Health::new()), Arc::default());
        let addr = server.local_addr();
        let ctx = WebContext { metrics: metrics::install().unwrap(), health: Arc::default(), streams: Arc::default(), credentials: None };
        let e = WebServer::start(addr, ctx).err().expect("a second bind must fail");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
