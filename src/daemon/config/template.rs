//! Output path templates: `{stream}` and `{start}` placeholders, and the
//! printf-style pattern splitmuxsink wants for numbered segments.

use std::time::{SystemTime, UNIX_EPOCH};

pub const PLACEHOLDERS: [&str; 2] = ["{stream}", "{start}"];

/// `start` in UTC as `20261121T075800Z`: sorts as text, and has no `:`
/// (not allowed in file names on some filesystems the recordings get copied to).
pub fn format_start(start: SystemTime) -> String {
    let secs = start.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
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

/// The first `{...}` that is not a known placeholder, if any.
pub fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let tail = &rest[open..];
        match PLACEHOLDERS.iter().find(|p| tail.starts_with(**p)) {
            Some(p) => rest = &tail[p.len()..],
            None => {
                let end = tail.find('}').map_or(tail.len(), |i| i + 1);
                return Some(tail[..end].to_string());
            }
        }
    }
    None
}

/// Expands the placeholders; anything else is left as written (validation
/// has already rejected unknown ones).
pub fn expand_lossy(template: &str, stream: &str, start: SystemTime) -> String {
    let mut out = template.replace("{stream}", stream);
    if out.contains("{start}") {
        out = out.replace("{start}", &format_start(start));
    }
    out
}

/// Splits `path` into (everything before the extension, the extension with
/// its dot). Only the last path component can hold the extension.
fn split_extension(path: &str) -> (&str, &str) {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_start..].rfind('.') {
        Some(dot) if dot > 0 => path.split_at(name_start + dot),
        _ => (path, ""),
    }
}

pub fn segment_pattern(path: &str) -> String {
    let (stem, ext) = split_extension(path);
    format!("{}-%05d{}", stem.replace('%', "%%"), ext.replace('%', "%%"))
}

/// How segment names look, for people: `rec/front-{start}-NNNNN.mp4`.
pub fn segment_name_pattern(path: &str) -> String {
    let (stem, ext) = split_extension(path);
    format!("{stem}-NNNNN{ext}")
}

pub fn segment_name(path: &str, index: u32) -> String {
    let (stem, ext) = split_extension(path);
    format!("{stem}-{index:05}{ext}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn start_is_compact_utc() {
        // Rule: {start} is the UTC start time as YYYYMMDDTHHMMSSZ.
        let t = UNIX_EPOCH + Duration::from_secs(1_795_247_880); // 2026-11-21 07:58:00 UTC
        assert_eq!(format_start(t), "20261121T075800Z");
        assert_eq!(format_start(UNIX_EPOCH), "19700101T000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400 + 86_399); // 2000-02-29 23:59:59
        assert_eq!(format_start(leap), "20000229T235959Z");
    }

    #[test]
    fn segment_index_goes_before_the_extension() {
        // Rule: segments are numbered before the extension, and % is escaped for printf.
        assert_eq!(segment_pattern("/rec/front-1.mp4"), "/rec/front-1-%05d.mp4");
        assert_eq!(segment_pattern("rec.d/front"), "rec.d/front-%05d");
        assert_eq!(segment_pattern("/rec/100%.mp4"), "/rec/100%%-%05d.mp4");
        assert_eq!(segment_pattern(".hidden"), ".hidden-%05d");
        assert_eq!(segment_name("/rec/front.mp4", 3), "/rec/front-00003.mp4");
    }

    #[test]
    fn unknown_placeholders_are_found() {
        // Rule: only {stream} and {start} are placeholders.
        assert_eq!(unknown_placeholder("/r/{stream}-{start}.mp4"), None);
        assert_eq!(unknown_placeholder("/r/{camera}.mp4").as_deref(), Some("{camera}"));
        assert_eq!(unknown_placeholder("/r/{stream.mp4").as_deref(), Some("{stream.mp4"));
    }
}
