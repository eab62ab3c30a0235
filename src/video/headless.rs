//! GStreamer's GL library on a headless box. NVIDIA's decoders (`nvh264dec`)
//! ask it for a display while negotiating, and with no `GST_GL_WINDOW` it
//! tries Wayland first: with no `XDG_RUNTIME_DIR` (systemd services, ssh
//! without a session, containers) libwayland prints "error: XDG_RUNTIME_DIR
//! is invalid or not set in the environment." to stderr for every decoder,
//! then GStreamer falls back to X11 or plain EGL. The lent H200 showed it
//! on every `roadseg process`. Naming the display GStreamer would have fallen
//! back to skips the failing attempt and the line.

use std::ffi::OsString;

/// The `GST_GL_WINDOW` to set, given the environment (`get`), or None to leave
/// it alone: when it is set, or when Wayland could be reached.
pub fn gl_window_choice(get: impl Fn(&str) -> Option<OsString>) -> Option<&'static str> {
    let set = |key: &str| get(key).is_some_and(|v| !v.is_empty());
    if set("GST_GL_WINDOW") || set("WAYLAND_DISPLAY") || set("XDG_RUNTIME_DIR") {
        return None;
    }
    // Checked on Debian's GStreamer 1.22 (gst_gl_display_new): with neither
    // set it prints the line and returns an EGL display, and "egl" returns
    // that same display type without the line.
    Some(if set("DISPLAY") { "x11" } else { "egl" })
}

/// Sets `GST_GL_WINDOW` per [`gl_window_choice`]. Call it first thing in
/// `main`, before any thread exists (setting the environment is not
/// thread-safe).
pub fn quiet_headless_gl() {
    if let Some(choice) = gl_window_choice(|key| std::env::var_os(key)) {
        // SAFETY: called at the top of main, while this is the only thread.
        unsafe { std::env::set_var("GST_GL_WINDOW", choice) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(vars: &[(&str, &str)]) -> Option<&'static str> {
        gl_window_choice(|key| vars.iter().find(|(k, _)| *k == key).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn names_a_display_only_where_wayland_cannot_be_reached_and_none_is_chosen() {
        assert_eq!(choice(&[]), Some("egl"));
        assert_eq!(choice(&[("DISPLAY", ":0")]), Some("x11"));
        assert_eq!(choice(&[("XDG_RUNTIME_DIR", "")]), Some("egl"), "empty counts as unset");
        assert_eq!(choice(&[("XDG_RUNTIME_DIR", "/run/user/1000")]), None);
        assert_eq!(choice(&[("WAYLAND_DISPLAY", "wayland-0")]), None);
        assert_eq!(choice(&[("GST_GL_WINDOW", "egl-device")]), None, "the user's choice stays");
    }
}
