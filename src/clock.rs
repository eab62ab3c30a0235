//! Wall-clock time as text, UTC, without a calendar crate: the daemon only
//! ever needs "now" and "when it started" written two ways.

use std::time::{SystemTime, UNIX_EPOCH};

/// (year, month, day, hour, minute, second, millisecond) of `t` in UTC.
fn parts(t: SystemTime) -> (i64, u32, u32, u64, u64, u64, u32) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60, since.subsec_millis())
}

/// `t` as `20261121T075800Z`: sorts as text, and has no `:` (not allowed in
/// file names on some filesystems recordings get copied to).
pub fn compact(t: SystemTime) -> String {
    let (y, m, d, hh, mm, ss, _) = parts(t);
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

/// `t` as RFC 3339 with milliseconds, `2026-11-21T07:58:00.123Z` (log and
/// JSON consumers parse this form).
pub fn rfc3339(t: SystemTime) -> String {
    let (y, m, d, hh, mm, ss, ms) = parts(t);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z")
}

/// The conversions [`strftime`] knows, with the digits each writes.
const CONVERSIONS: [(char, usize); 6] = [('Y', 4), ('m', 2), ('d', 2), ('H', 2), ('M', 2), ('S', 2)];

/// Whether `pattern` holds any time conversion (`%Y`, ...; `%%` is a
/// literal percent sign).
pub fn has_conversions(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next().is_some_and(|n| n != '%') {
            return true;
        }
    }
    false
}

/// The first `%x` in `pattern` that [`strftime`] does not know.
pub fn unknown_conversion(pattern: &str) -> Option<String> {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some('%') => {}
            Some(n) if CONVERSIONS.iter().any(|(k, _)| *k == n) => {}
            other => return Some(format!("%{}", other.map(String::from).unwrap_or_default())),
        }
    }
    None
}

/// `t` (UTC) written into `pattern`: `%Y %m %d %H %M %S`, `%%` for `%`.
/// Unknown conversions are left as written (validation rejects them).
pub fn strftime(pattern: &str, t: SystemTime) -> String {
    let (y, m, d, hh, mm, ss, _) = parts(t);
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{y:04}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Whether `name` is what [`strftime`] writes for `pattern` at some time.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (mut p, mut n) = (pattern.chars().peekable(), name);
    while let Some(c) = p.next() {
        if c == '%' {
            match p.next() {
                Some('%') => match n.strip_prefix('%') {
                    Some(rest) => n = rest,
                    None => return false,
                },
                Some(k) => {
                    let Some(&(_, width)) = CONVERSIONS.iter().find(|(x, _)| *x == k) else { return false };
                    if n.len() < width || !n.as_bytes()[..width].iter().all(u8::is_ascii_digit) {
                        return false;
                    }
                    n = &n[width..];
                }
                None => return false,
            }
        } else {
            match n.strip_prefix(c) {
                Some(rest) => n = rest,
                None => return false,
            }
        }
    }
    n.is_empty()
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_247_880_123);
        assert_eq!(compact(t), "20261121T075800Z");
        assert_eq!(rfc3339(t), "2026-11-21T07:58:00.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_868_799);
        assert_eq!(rfc3339(leap), "2000-02-29T23:59:59.000Z");
        assert_eq!(strftime("cam/%Y-%m-%d/%H-%M-%S.mp4", t), "cam/2026-11-21/07-58-00.mp4");
        assert_eq!(strftime("100%%-%S", t), "100%-00");
    }

    #[test]
    fn patterns() {
        assert!(has_conversions("a/%Y.mp4") && !has_conversions("a/100%%.mp4") && !has_conversions("a.mp4"));
        assert_eq!(unknown_conversion("%Y-%q"), Some("%q".into()));
        assert_eq!(unknown_conversion("%Y/%m/%d/%H%M%S%%"), None);
        let p = "cam/%Y-%m-%d/%H-%M-%S.mp4";
        assert!(matches(p, "cam/2026-11-21/07-58-00.mp4"));
        assert!(!matches(p, "cam/2026-11-21/07-58-00-1.mp4"));
        assert!(!matches(p, "cam/2026-11-2x/07-58-00.mp4"));
        assert!(matches(&p.replace(".mp4", "-1.mp4"), "cam/2026-11-21/07-58-00-1.mp4"));
    }
}
