//! MQTT events for Home Assistant / Node-RED style consumers: the daemon's
//! and each stream's status (retained, "offline" as the daemon's last
//! will), each stream's numbers at a fixed rate, and events when a stream
//! goes up or down, reconnects, becomes degraded (drops most of its frames,
//! daemon::overload) or recovers, or its road coverage crosses a threshold.
//!
//! The publisher only reads state the daemon already keeps (health, the
//! per-stream readings), once a second: nothing on the frame path waits for
//! the broker. A broker that goes away is retried for ever; retained
//! statuses are published again on every (re)connection.
//!
//! Topics (`P` = `topic_prefix`):
//! `P/status` online|offline (retained), `P/streams/NAME/status`
//! online|offline (retained), `P/streams/NAME/stats` JSON every
//! `stats_interval_s`, `P/streams/NAME/events` JSON per event.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{RecvTimeoutError, Sender, TryRecvError};
use rumqttc::{Client, Event, LastWill, MqttOptions, Packet, QoS};

use super::config::{MqttConfig, parse_mqtt_url};
pub use super::config::MqttError;
use super::health::Health;
use super::metrics::{StreamMetrics, StreamReading};

const POLL: Duration = Duration::from_secs(1);
/// Requests queued towards the broker; when it is away, older stats are
/// not worth keeping beyond this.
const QUEUE: usize = 256;


/// The events between two polls of a stream (none on first sight).
fn changes(before: Option<&Seen>, now: &Seen) -> Vec<&'static str> {
    let Some(b) = before else { return Vec::new() };
    let mut out = Vec::new();
    if b.up != now.up {
        out.push(if now.up { "up" } else { "down" });
    }
    if now.reconnects > b.reconnects {
        out.push("reconnect");
    }
    if b.degraded != now.degraded {
        out.push(if now.degraded { "degraded" } else { "recovered" });
    }
    if let (Some(was), Some(is)) = (b.above, now.above)
        && was != is
    {
        out.push(if is { "coverage_above" } else { "coverage_below" });
    }
    out
}

/// The publisher thread's state: what it saw of each stream last time.
struct Poller {
    prefix: String,
    client: Client,
    interval: Duration,
    threshold: Option<f64>,
    seen: BTreeMap<String, Seen>,
    was_connected: bool,
    last_stats: Option<Instant>,
}

impl Poller {
    /// `leaf` under the prefix. Never blocks: a full queue (broker away)
    /// drops the message.
    fn publish(&self, leaf: &str, retain: bool, payload: String) {
        let _ = self.client.try_publish(format!("{}/{leaf}", self.prefix), QoS::AtLeastOnce, retain, payload);
    }

    fn poll(&mut self, connected: bool, health: &Health, streams: &RwLock<HashMap<String, StreamMetrics>>) {
        // Retained statuses again after every (re)connection: the broker may have restarted empty.
        let republish = connected && !self.was_connected;
        self.was_connected = connected;
        if republish {
            self.publish("status", true, "online".into());
        }
        let stats_due = self.last_stats.is_none_or(|t| t.elapsed() >= self.interval);
        let states = health.stream_states();
        let metrics = streams.read().unwrap_or_else(PoisonError::into_inner).clone();
        for (name, up) in &states {
            self.poll_stream(name, *up, health.is_degraded(name), metrics.get(name).map(StreamMetrics::readings), republish, stats_due);
        }
        self.seen.retain(|name, _| states.iter().any(|(n, _)| n == name));
        if stats_due {
            self.last_stats = Some(Instant::now());
        }
    }

    fn poll_stream(&mut self, name: &str, up: bool, degraded: bool, reading: Option<StreamReading>, republish: bool, stats_due: bool) {
        let before = self.seen.get(name).cloned();
        let coverage = reading.as_ref().and_then(|r| r.road_coverage);
        let now = Seen {
            up,
            reconnects: reading.as_ref().map_or(0, |r| r.reconnects),
            above: self.threshold.zip(coverage).map(|(t, c)| c >= t).or(before.as_ref().and_then(|b| b.above)),
            degraded,
        };
        let time = || crate::clock::rfc3339(SystemTime::now());
        if republish || before.as_ref().is_none_or(|b| b.up != up) {
            self.publish(&format!("streams/{name}/status"), true, if up { "online" } else { "offline" }.into());
        }
        for kind in changes(before.as_ref(), &now) {
            let mut event = serde_json::json!({ "time": time(), "stream": name, "event": kind });
            match kind {
                "reconnect" => event["reconnects"] = now.reconnects.into(),
                "coverage_above" | "coverage_below" => {
                    event["road_coverage"] = coverage.into();
                    event["threshold"] = self.threshold.into();
                }
                _ => {}
            }
            self.publish(&format!("streams/{name}/events"), false, event.to_string());
        }
        if let Some(r) = reading.filter(|_| stats_due) {
            let stats = serde_json::json!({
                "time": time(),
                "stream": name,
                "up": up,
                "degraded": degraded,
                "road_coverage": r.road_coverage,
                "mean_confidence": r.mean_confidence,
                "recording": r.recording,
                "frames_decoded": r.frames_decoded,
                "frames_inferred": r.frames_inferred,
                "frames_dropped": r.dropped.iter().map(|(_, n)| n).sum::<u64>(),
                "reconnects": r.reconnects,
                "latency_s": r.latency_s,
            });
            self.publish(&format!("streams/{name}/stats"), false, stats.to_string());
        }
        self.seen.insert(name.to_string(), now);
    }
}

pub struct MqttPublisher {
    /// Dropped to stop both threads.
    stop: Sender<()>,
    threads: Vec<JoinHandle<()>>,
    client: Client,
}

/// What the last poll saw of a stream.
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    up: bool,
    reconnects: u64,
    above: Option<bool>,
    degraded: bool,
}

impl MqttPublisher {
    pub fn start(
        cfg: &MqttConfig,
        health: Arc<Health>,
        streams: Arc<RwLock<HashMap<String, StreamMetrics>>>,
    ) -> Result<MqttPublisher, MqttError> {
        let (host, port) = parse_mqtt_url(&cfg.url)?;
        let prefix = cfg.topic_prefix.trim_end_matches('/').to_string();
        let mut options = MqttOptions::new(cfg.client_id.clone(), host, port);
        options.set_keep_alive(Duration::from_secs(15));
        options.set_last_will(LastWill::new(format!("{prefix}/status"), "offline", QoS::AtLeastOnce, true));
        if let (Some(user), Some(pass)) = (&cfg.username, &cfg.password) {
            options.set_credentials(user.clone(), pass.clone());
        }
        let (client, mut connection) = Client::new(options, QUEUE);
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let connected = Arc::new(AtomicBool::new(false));
        let url = cfg.url.clone();
        let network = {
            let (stopped, connected) = (stopped.clone(), connected.clone());
            std::thread::Builder::new()
                .name("roadseg-mqtt-net".into())
                .spawn(move || {
                    let mut logged_down = false;
                    for event in connection.iter() {
                        // The connection yields an event at least every keep-alive or retry.
                        if !matches!(stopped.try_recv(), Err(TryRecvError::Empty)) {
                            break;
                        }
                        match event {
                            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                                tracing::info!(broker = %url, "MQTT connected");
                                connected.store(true, Ordering::SeqCst);
                                logged_down = false;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                connected.store(false, Ordering::SeqCst);
                                if !logged_down {
                                    tracing::warn!(broker = %url, "MQTT broker unreachable, retrying every second: {e}");
                                    logged_down = true;
                                }
                                std::thread::sleep(POLL);
                            }
                        }
                    }
                })
                .expect("spawning the MQTT network thread")
        };
        let publisher = {
            let mut poller = Poller {
                prefix,
                client: client.clone(),
                interval: Duration::from_secs(cfg.stats_interval_s.max(1)),
                threshold: cfg.coverage_threshold,
                seen: BTreeMap::new(),
                was_connected: false,
                last_stats: None,
            };
            std::thread::Builder::new()
                .name("roadseg-mqtt".into())
                .spawn(move || {
                    loop {
                        poller.poll(connected.load(Ordering::SeqCst), &health, &streams);
                        if !matches!(stopped.recv_timeout(POLL), Err(RecvTimeoutError::Timeout)) {
                            break;
                        }
                    }
                    poller.publish("status", true, "offline".into());
                })
                .expect("spawning the MQTT publisher thread")
        };
        tracing::info!(broker = %cfg.url, prefix = %cfg.topic_prefix, "publishing MQTT events");
        Ok(MqttPublisher { stop, threads: vec![publisher, network], client })
    }

    /// Says "offline" (retained) and disconnects, within about a second.
    pub fn stop(self) {
        drop(self.stop);
        let mut threads = self.threads.into_iter();
        if let Some(publisher) = threads.next() {
            let _ = publisher.join();
        }
        // Give the offline message a moment to leave before disconnecting.
        std::thread::sleep(Duration::from_millis(300));
        let _ = self.client.try_disconnect();
        // The network thread is not waited for: against an unreachable broker it
        // may sit in a connect attempt, and shutdown has its own deadline.
        drop(threads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_the_changes_between_polls() {
        // Rule: up/down, a reconnect, becoming degraded or recovering, and a coverage threshold crossing each make one event; nothing on first sight or without change.
        let seen = |up, reconnects, above| Seen { up, reconnects, above, degraded: false };
        assert!(changes(None, &seen(true, 0, Some(true))).is_empty());
        assert!(changes(Some(&seen(true, 1, Some(true))), &seen(true, 1, Some(true))).is_empty());
        assert_eq!(changes(Some(&seen(false, 0, None)), &seen(true, 0, Some(false))), ["up"]);
        assert_eq!(changes(Some(&seen(true, 2, Some(false))), &seen(false, 3, Some(true))), ["down", "reconnect", "coverage_above"]);
        assert_eq!(changes(Some(&seen(true, 0, Some(true))), &seen(true, 0, Some(false))), ["coverage_below"]);
        let degraded = Seen { degraded: true, ..seen(true, 0, None) };
        assert_eq!(changes(Some(&seen(true, 0, None)), &degraded), ["degraded"]);
        assert_eq!(changes(Some(&degraded), &seen(true, 0, None)), ["recovered"]);
    }

    #[test]
    fn broker_urls() {
        assert_eq!(parse_mqtt_url("mqtt://127.0.0.1:1884").unwrap(), ("127.0.0.1".into(), 1884));
        assert_eq!(parse_mqtt_url("mqtt://broker.local").unwrap(), ("broker.local".into(), 1883));
        assert_eq!(parse_mqtt_url("mqtt://[::1]:1883").unwrap(), ("::1".into(), 1883));
        for bad in ["", "mqtts://h", "tcp://h:1", "mqtt://", "mqtt://h:x", "mqtt://u:p@h", "mqtt://h/x"] {
            assert!(parse_mqtt_url(bad).is_err(), "{bad}");
        }
    }
}
