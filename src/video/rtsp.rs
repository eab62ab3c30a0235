//! Video out over RTSP: a gst-rtsp-server on its own thread and main context,
//! with one shared, always-encoding-while-watched media per mounted path.

mod feed;
mod viewers;

pub use feed::RtspFeed;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::glib;
use gstreamer_rtsp_server as rtsp;
use gstreamer_rtsp_server::prelude::*;

use super::encoder::{self, EncoderError, EncoderSettings};
use super::frame::VideoInfo;
use super::launch::{self, GstError};
use super::packed::FrameSizeError;

/// How often expired RTSP sessions are freed (as gst-rtsp-server's examples do).
const SESSION_CLEANUP_EVERY: Duration = Duration::from_secs(2);

/// The role the one configured user gets; factories grant it access.
const ROLE: &str = "viewer";

#[derive(Debug, thiserror::Error)]
pub enum RtspError {
    #[error("cannot listen for RTSP on {addr}: {source} (is the port in use, or below 1024 without privileges?)")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("cannot listen for RTSP on {addr}: gst-rtsp-server could not bind (is the port in use, or below 1024 without privileges?)")]
    Bind { addr: SocketAddr, source: Option<glib::BoolError> },
    #[error("the RTSP server thread did not come up (it may have panicked)")]
    Startup,
    #[error("RTSP path {path:?} must start with '/' (e.g. /cam1)")]
    BadPath { path: String },
    #[error("RTSP path {path} is already mounted (remove_stream it first)")]
    PathInUse { path: String },
    #[error("no RTSP stream is mounted at {path}")]
    NotMounted { path: String },
    #[error("bad RTSP stream format for {path}: {detail}")]
    Format { path: String, detail: String },
    #[error("frame does not fit RTSP stream {path}: {source}")]
    FrameSize { path: String, source: FrameSizeError },
    #[error(transparent)]
    Encoder(#[from] EncoderError),
    #[error("{}", .0.worded(&GST_PHRASES))]
    Gst(#[from] GstError),
}

launch::gst_errors!(RtspError, launch: "cannot initialise GStreamer", call: "GStreamer call failed in the RTSP server", state_change: "the RTSP server refused to start");

/// A running RTSP server. Dropping it shuts it down, like [`RtspServer::shutdown`].
pub struct RtspServer {
    server: rtsp::RTSPServer,
    context: glib::MainContext,
    main_loop: glib::MainLoop,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
    auth: bool,
    clients: Arc<AtomicUsize>,
    viewers: viewers::Viewers,
    feeds: Mutex<HashMap<String, RtspFeed>>,
}

impl RtspServer {
    /// Listens on `listen` (port 0 picks a free one, see [`RtspServer::local_addr`]).
    /// With `auth`, clients must give that user and password (HTTP Basic);
    /// anonymous clients are refused.
    pub fn start(listen: SocketAddr, auth: Option<(String, String)>) -> Result<RtspServer, RtspError> {
        gst::init()?;
        if listen.port() != 0 {
            // gst-rtsp-server only logs why a bind failed; std says it in words.
            TcpListener::bind(listen).map_err(|source| RtspError::Listen { addr: listen, source })?;
        }
        let server = rtsp::RTSPServer::new();
        server.set_address(&listen.ip().to_string());
        server.set_service(&listen.port().to_string());
        if let Some((user, pass)) = &auth {
            let a = rtsp::RTSPAuth::new();
            let token = rtsp::RTSPToken::builder().field(rtsp::RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE).build();
            a.add_basic(rtsp::RTSPAuth::make_basic(user, pass).as_str(), &token);
            server.set_auth(Some(&a));
        }
        let clients = Arc::new(AtomicUsize::new(0));
        let viewers = viewers::Viewers::default();
        {
            let (clients, viewers) = (clients.clone(), viewers.clone());
            server.connect_client_connected(move |_, client| {
                clients.fetch_add(1, Ordering::AcqRel);
                let mounts = Arc::new(viewers::ClientMounts::default());
                let path = |ctx: &rtsp::RTSPContext| ctx.uri().map(|u| viewers::request_path(&u.request_uri()).to_string());
                let (v, m) = (viewers.clone(), mounts.clone());
                client.connect_play_request(move |_, ctx| {
                    if let Some(p) = path(ctx) {
                        v.play(&m, &p);
                    }
                });
                let (v, m) = (viewers.clone(), mounts.clone());
                client.connect_teardown_request(move |_, ctx| {
                    if let Some(p) = path(ctx) {
                        v.teardown(&m, &p);
                    }
                });
                // A viewer that hangs up without TEARDOWN would leave its session
                // (and what it holds) in the pool until the session timeout. Its
                // media went with the connection (RTP over this TCP connection,
                // or UDP that the server stops sending), so the session goes too.
                let sessions = Arc::new(Mutex::new(Vec::<glib::WeakRef<rtsp::RTSPSession>>::new()));
                let opened = sessions.clone();
                client.connect_new_session(move |_, session| {
                    opened.lock().unwrap_or_else(|e| e.into_inner()).push(session.downgrade());
                });
                let (clients, v) = (clients.clone(), viewers.clone());
                client.connect_closed(move |client| {
                    clients.fetch_sub(1, Ordering::AcqRel);
                    v.closed(&mounts);
                    let left: Vec<_> = std::mem::take(&mut *sessions.lock().unwrap_or_else(|e| e.into_inner()));
                    if let Some(pool) = client.session_pool() {
                        for session in left.iter().filter_map(|w| w.upgrade()) {
                            let _ = pool.remove(&session);
                        }
                    }
                });
            });
        }

        let context = glib::MainContext::new();
        let main_loop = glib::MainLoop::new(Some(&context), false);
        let (tx, rx) = mpsc::channel();
        let thread = {
            let (server, context, main_loop) = (server.clone(), context.clone(), main_loop.clone());
            std::thread::Builder::new()
                .name("rtsp-server".into())
                .spawn(move || {
                    // Thread-default, so the clients the server creates attach here too.
                    let _ = context.with_thread_default(|| match server.attach(Some(&context)) {
                        Ok(source) => {
                            // Sessions of viewers that vanished without TEARDOWN expire
                            // after their timeout, but are only freed by a cleanup pass.
                            if let Some(pool) = server.session_pool() {
                                glib::timeout_source_new(SESSION_CLEANUP_EVERY, None, glib::Priority::DEFAULT, move || {
                                    pool.cleanup();
                                    glib::ControlFlow::Continue
                                })
                                .attach(Some(&context));
                            }
                            let _ = tx.send(Ok(server.bound_port()));
                            main_loop.run();
                            // Closes the listening socket. (SourceId::remove would look in
                            // the global default context, not this one.)
                            if let Some(s) = context.find_source_by_id(&source) {
                                s.destroy();
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    });
                })
                .map_err(|e| glib::bool_error!("cannot start the RTSP server thread: {e}"))?
        };
        let port = match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(port)) if port > 0 => port as u16,
            Ok(bound) => {
                let _ = thread.join();
                return Err(RtspError::Bind { addr: listen, source: bound.err() });
            }
            Err(_) => return Err(RtspError::Startup),
        };
        let addr = SocketAddr::new(listen.ip(), port);
        tracing::info!(%addr, auth = auth.is_some(), "RTSP server listening");
        Ok(RtspServer {
            server,
            context,
            main_loop,
            thread: Some(thread),
            addr,
            auth: auth.is_some(),
            clients,
            viewers,
            feeds: Mutex::default(),
        })
    }

    /// The address actually listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `rtsp://ADDR/path`, for logs and clients.
    pub fn url(&self, path: &str) -> String {
        format!("rtsp://{}{}", self.addr, path)
    }

    /// Clients playing the stream mounted at `path` (e.g. `/cam`).
    pub fn clients_at(&self, path: &str) -> usize {
        self.viewers.count(path)
    }

    /// Connected RTSP clients, all paths together.
    pub fn client_count(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    /// Mounts a stream of `info`-sized RGBA frames at `path`, H.264 encoded with
    /// the default encoder settings (1 s keyframe interval for quick joins).
    pub fn add_stream(&self, path: &str, info: VideoInfo) -> Result<RtspFeed, RtspError> {
        self.add_stream_with(path, info, &Self::encoder(EncoderSettings::default().bitrate_kbps))
    }

    /// Encoder settings for a mount at `bitrate_kbps`: keyframes every second
    /// so a joining client sees a picture quickly.
    pub fn encoder(bitrate_kbps: u32) -> EncoderSettings {
        EncoderSettings { keyframe_interval: Duration::from_secs(1), bitrate_kbps, ..EncoderSettings::default() }
    }

    pub fn add_stream_with(
        &self,
        path: &str,
        info: VideoInfo,
        encoder: &EncoderSettings,
    ) -> Result<RtspFeed, RtspError> {
        if !path.starts_with('/') {
            return Err(RtspError::BadPath { path: path.into() });
        }
        if info.width == 0 || info.height == 0 || info.fps_num <= 0 || info.fps_den <= 0 {
            let detail =
                format!("{}x{} at {}/{} fps (all must be > 0)", info.width, info.height, info.fps_num, info.fps_den);
            return Err(RtspError::Format { path: path.into(), detail });
        }
        let mut feeds = self.feeds.lock().map_err(|_| glib::bool_error!("feed table poisoned"))?;
        if feeds.contains_key(path) {
            return Err(RtspError::PathInUse { path: path.into() });
        }
        let choice = encoder::choose(encoder, &info)?;
        let (feed, factory) = RtspFeed::new(path, info, &choice)?;
        if self.auth {
            let role = gst::Structure::builder(ROLE)
                .field(rtsp::RTSP_PERM_MEDIA_FACTORY_ACCESS, true)
                .field(rtsp::RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, true)
                .build();
            factory.add_role_from_structure(&role);
        }
        let mounts = self.server.mount_points().ok_or_else(|| glib::bool_error!("RTSP server has no mount points"))?;
        mounts.add_factory(path, factory);
        feeds.insert(path.to_string(), feed.clone());
        self.viewers.mount(path);
        tracing::info!(url = %self.url(path), encoder = %choice, "RTSP stream mounted");
        Ok(feed)
    }

    /// Unmounts `path`: new clients get 404, current ones get end-of-stream, and
    /// the feed drops every later frame.
    pub fn remove_stream(&self, path: &str) -> Result<(), RtspError> {
        let feed = self.feeds.lock().ok().and_then(|mut f| f.remove(path));
        self.viewers.unmount(path);
        let Some(feed) = feed else {
            return Err(RtspError::NotMounted { path: path.into() });
        };
        if let Some(mounts) = self.server.mount_points() {
            mounts.remove_factory(path);
        }
        feed.close();
        Ok(())
    }

    /// Disconnects every client, stops the server thread and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        if let Ok(mut feeds) = self.feeds.lock() {
            feeds.drain().for_each(|(_, f)| f.close());
        }
        let (server, main_loop) = (self.server.clone(), self.main_loop.clone());
        // Client sockets belong to the server's context: close them from there.
        self.context.invoke(move || {
            server.client_filter(Some(&mut |_, _| rtsp::RTSPFilterResult::Remove));
            main_loop.quit();
        });
        let _ = thread.join();
    }
}

impl Drop for RtspServer {
    fn drop(&mut self) {
        self.stop();
    }
}
