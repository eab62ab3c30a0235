//! systemd notifications (`Type=notify`): readiness, reload, stop, status
//! text and watchdog pings. Every call is a no-op when `NOTIFY_SOCKET` is
//! unset, i.e. when not started by systemd, so callers need no checks.
//!
//! The caller decides what a failure means; normally it is logged and
//! ignored, since the service keeps working without systemd knowing.

use std::io;
use std::time::Duration;

use sd_notify::NotifyState;

#[derive(Debug, thiserror::Error)]
#[error("cannot notify systemd ({what}): {err}")]
pub struct NotifyError {
    what: &'static str,
    err: io::Error,
}

fn send(what: &'static str, states: &[NotifyState]) -> Result<(), NotifyError> {
    sd_notify::notify(states).map_err(|err| NotifyError { what, err })
}

/// Whether systemd is listening (the process was started as a notify service).
pub fn is_supervised() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty())
}

/// Start-up finished: systemd marks the unit active and `systemctl start` returns.
pub fn ready() -> Result<(), NotifyError> {
    send("READY=1", &[NotifyState::Ready])
}

/// A SIGHUP reload begins; follow with [`ready`] when it is done, so
/// `systemctl reload` waits for it.
pub fn reloading() -> Result<(), NotifyError> {
    // systemd wants the monotonic time with RELOADING=1 to order the two messages.
    let now = NotifyState::monotonic_usec_now().map_err(|err| NotifyError { what: "RELOADING=1", err })?;
    send("RELOADING=1", &[NotifyState::Reloading, now])
}

/// Shutdown begins: systemd stops counting the watchdog and shows "deactivating".
pub fn stopping() -> Result<(), NotifyError> {
    send("STOPPING=1", &[NotifyState::Stopping])
}

/// One line for `systemctl status`, e.g. "3 streams up, 24.8 fps".
pub fn status(text: &str) -> Result<(), NotifyError> {
    send("STATUS=", &[NotifyState::Status(&one_line(text))])
}

/// Keep-alive; send at [`watchdog_interval`] from a thread that only does it
/// when the daemon is healthy (a stuck main loop should get restarted).
pub fn watchdog() -> Result<(), NotifyError> {
    send("WATCHDOG=1", &[NotifyState::Watchdog])
}

/// `WatchdogSec=` as passed in `WATCHDOG_USEC`, when it is meant for this process.
pub fn watchdog_timeout() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

/// How often to call [`watchdog`]: half the timeout, as sd_watchdog_enabled(3)
/// advises, so one late ping does not get the service killed.
pub fn watchdog_interval() -> Option<Duration> {
    watchdog_timeout().map(ping_interval)
}

fn ping_interval(timeout: Duration) -> Duration {
    (timeout / 2).max(Duration::from_millis(1))
}

/// A newline would start a new `KEY=value` assignment in the datagram.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_pings_at_half_the_timeout() {
        // Rule: ping at half of WATCHDOG_USEC.
        assert_eq!(ping_interval(Duration::from_secs(30)), Duration::from_secs(15));
        assert_eq!(ping_interval(Duration::from_micros(1)), Duration::from_millis(1));
    }

    #[test]
    fn status_text_stays_one_assignment() {
        // Rule: status text cannot smuggle in other assignments such as READY=1.
        assert_eq!(one_line("2 streams up\nREADY=1"), "2 streams up READY=1");
    }

    #[test]
    fn calls_are_no_ops_outside_systemd() {
        // Rule: without NOTIFY_SOCKET every notification succeeds and does nothing.
        if is_supervised() {
            return; // running under a notify service: sending would be real
        }
        ready().unwrap();
        reloading().unwrap();
        status("testing").unwrap();
        watchdog().unwrap();
        stopping().unwrap();
    }
}
