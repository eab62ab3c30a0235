//! Where an MP4's video presentation starts inside its track, read from the
//! file's edit list. A clip cut without re-encoding (`ffmpeg -ss T -i in.mp4
//! -c copy`, most editors' "trim") keeps the track from the keyframe before
//! the cut and says "start T' in" with an edit list. GStreamer 1.22's qtdemux
//! compares the track's own timestamps with the presentation's length when it
//! decides a file has ended, so such a file stops at the first keyframe past
//! (length - T'): up to T' seconds of a whole file go missing. Knowing T' lets
//! the daemon say that, rather than call a good file truncated.
//!
//! Only the boxes on the way to `elst` are read: the top-level box headers,
//! then the `moov` box (the index, a few hundred KiB even for long clips).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// A `moov` larger than this is not read (a damaged size field, not an index).
const MAX_MOOV_BYTES: u64 = 64 << 20;

/// Samples past this are not indexed (a damaged count, not a clip).
const MAX_SAMPLES: usize = 1 << 24;

/// An MP4's video edit, read from its index once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VideoEdit {
    /// Seconds into the video track at which the first non-empty edit
    /// starts the presentation.
    pub start_s: f64,
    /// Seconds at the end of the presentation that a demuxer comparing the
    /// track's own decode times with the movie's duration at each keyframe
    /// (as GStreamer 1.22's qtdemux does) leaves out: it stops at the first
    /// keyframe whose track time reaches the movie's duration, while the
    /// presentation runs on to edit start + duration. 0 when no keyframe
    /// falls in that span (the file is read whole); None when the sample
    /// tables cannot be read.
    pub predicted_cut_s: Option<f64>,
}

/// The video track's edit, when the file is an MP4/MOV with an edit list
/// that starts the presentation; None for other files, files without one,
/// or an index that cannot be read.
pub fn video_edit(path: &Path) -> Option<VideoEdit> {
    let mut file = File::open(path).ok()?;
    let moov = read_top_level(&mut file, *b"moov")?;
    let (trak, start_s) = children(&moov).filter(|(kind, _)| kind == b"trak").find_map(|(_, t)| Some((t, video_trak_start(t)?)))?;
    Some(VideoEdit { start_s, predicted_cut_s: predicted_cut(&moov, trak, start_s) })
}

fn predicted_cut(moov: &[u8], trak: &[u8], start_s: f64) -> Option<f64> {
    let mvhd = child(moov, b"mvhd")?;
    // mvhd v0: timescale at 12, duration (u32) at 16; v1: at 20 and (u64) 24.
    let (movie_scale, movie_duration) = match mvhd.first()? {
        0 => (be_u32(mvhd, 12)?, be_u32(mvhd, 16)? as u64),
        1 => (be_u32(mvhd, 20)?, be_u64(mvhd, 24)?),
        _ => return None,
    };
    if movie_scale == 0 {
        return None;
    }
    let duration_s = movie_duration as f64 / movie_scale as f64;
    let mdia = child(trak, b"mdia")?;
    let stbl = child(child(mdia, b"minf")?, b"stbl")?;
    let timescale = media_timescale(mdia)? as f64;
    let end_s = start_s + duration_s;
    // Decode times from stts: (sample_count, sample_delta) runs.
    let stts = child(stbl, b"stts")?;
    let mut dts = Vec::new();
    let mut t = 0u64;
    for i in 0..be_u32(stts, 4)? as usize {
        let (count, delta) = (be_u32(stts, 8 + i * 8)?, be_u32(stts, 12 + i * 8)?);
        for _ in 0..count {
            if dts.len() >= MAX_SAMPLES {
                return None;
            }
            dts.push(t as f64 / timescale);
            t += delta as u64;
        }
    }
    // Keyframes from stss (1-based sample numbers); without one, every sample.
    let keyframes: Vec<usize> = match child(stbl, b"stss") {
        Some(stss) => (0..(be_u32(stss, 4)? as usize).min(MAX_SAMPLES))
            .filter_map(|i| be_u32(stss, 8 + i * 4).and_then(|n| (n as usize).checked_sub(1)))
            .collect(),
        None => (0..dts.len()).collect(),
    };
    let stop = keyframes.iter().filter_map(|&k| dts.get(k).copied()).filter(|&d| d >= duration_s && d < end_s).fold(f64::INFINITY, f64::min);
    Some(if stop.is_finite() { end_s - stop } else { 0.0 })
}

/// The body of the first top-level box of `kind`, found by hopping over the
/// others' headers (an `mdat` of gigabytes is skipped, not read).
fn read_top_level(file: &mut File, kind: [u8; 4]) -> Option<Vec<u8>> {
    let end = file.metadata().ok()?.len();
    let mut at = 0u64;
    while at + 8 <= end {
        file.seek(SeekFrom::Start(at)).ok()?;
        let mut header = [0u8; 16];
        file.read_exact(&mut header[..8]).ok()?;
        let size32 = u32::from_be_bytes(header[..4].try_into().ok()?) as u64;
        let (size, header_len) = match size32 {
            0 => (end - at, 8),
            1 => {
                file.read_exact(&mut header[8..16]).ok()?;
                (u64::from_be_bytes(header[8..16].try_into().ok()?), 16)
            }
            n => (n, 8),
        };
        if size < header_len || at + size > end {
            return None;
        }
        if header[4..8] == kind {
            let body_len = size - header_len;
            if body_len > MAX_MOOV_BYTES {
                return None;
            }
            let mut body = vec![0u8; body_len as usize];
            file.read_exact(&mut body).ok()?;
            return Some(body);
        }
        at += size;
    }
    None
}

/// The child boxes of a container box's body: (type, body).
fn children(body: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.len() < 8 {
            return None;
        }
        let size32 = u32::from_be_bytes(rest[..4].try_into().ok()?) as usize;
        let kind: [u8; 4] = rest[4..8].try_into().ok()?;
        let (size, header_len) = match size32 {
            0 => (rest.len(), 8),
            1 => (usize::try_from(u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?)).ok()?, 16),
            n => (n, 8),
        };
        if size < header_len || size > rest.len() {
            return None;
        }
        let child = &rest[header_len..size];
        rest = &rest[size..];
        Some((kind, child))
    })
}

fn child<'a>(body: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(body).find(|(k, _)| k == kind).map(|(_, b)| b)
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The track's own timescale (ticks a second), from `mdia`'s `mdhd`.
fn media_timescale(mdia: &[u8]) -> Option<u32> {
    let mdhd = child(mdia, b"mdhd")?;
    // mdhd v0: times are 32-bit (timescale at 12); v1: 64-bit (timescale at 20).
    let timescale = match mdhd.first()? {
        0 => be_u32(mdhd, 12)?,
        1 => be_u32(mdhd, 20)?,
        _ => return None,
    };
    (timescale > 0).then_some(timescale)
}

/// A `trak`'s edit start in seconds, if it is a video track with an edit list.
fn video_trak_start(trak: &[u8]) -> Option<f64> {
    let mdia = child(trak, b"mdia")?;
    // hdlr: version+flags (4), pre_defined (4), handler_type (4).
    if child(mdia, b"hdlr")?.get(8..12)? != b"vide" {
        return None;
    }
    let timescale = media_timescale(mdia)?;
    let elst = child(child(trak, b"edts")?, b"elst")?;
    let version = *elst.first()?;
    let entries = be_u32(elst, 4)? as usize;
    // Entries: v0 (duration u32, media_time i32, rate 4 bytes), v1 (u64, i64, 4).
    let entry_len = if version == 1 { 20 } else { 12 };
    (0..entries.min(1024)).find_map(|i| {
        let at = 8 + i * entry_len;
        let media_time = if version == 1 { be_u64(elst, at + 8)? as i64 } else { be_u32(elst, at + 4)? as i32 as i64 };
        // -1 marks an empty edit (a pause before the track plays), not a start.
        (media_time >= 0).then(|| media_time as f64 / timescale as f64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    }

    fn hdlr(handler: &[u8; 4]) -> Vec<u8> {
        let mut body = vec![0u8; 8];
        body.extend_from_slice(handler);
        body.extend_from_slice(&[0u8; 13]);
        boxed(b"hdlr", &body)
    }

    fn mdhd_v0(timescale: u32) -> Vec<u8> {
        let mut body = vec![0u8; 12];
        body.extend_from_slice(&timescale.to_be_bytes());
        body.extend_from_slice(&[0u8; 8]);
        boxed(b"mdhd", &body)
    }

    fn elst_v0(entries: &[(u32, i32)]) -> Vec<u8> {
        let mut body = vec![0u8; 4];
        body.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for (duration, media_time) in entries {
            body.extend_from_slice(&duration.to_be_bytes());
            body.extend_from_slice(&media_time.to_be_bytes());
            body.extend_from_slice(&0x0001_0000u32.to_be_bytes());
        }
        boxed(b"elst", &body)
    }

    fn trak(handler: &[u8; 4], timescale: u32, edits: Option<&[(u32, i32)]>) -> Vec<u8> {
        let mdia = boxed(b"mdia", &[hdlr(handler), mdhd_v0(timescale)].concat());
        let mut body = Vec::new();
        if let Some(e) = edits {
            body.extend(boxed(b"edts", &elst_v0(e)));
        }
        body.extend(mdia);
        boxed(b"trak", &body)
    }

    fn write_mp4(dir: &Path, moov_body: &[u8]) -> std::path::PathBuf {
        let path = dir.join("clip.mp4");
        // mdat before moov with a 64-bit size, as long recordings write it.
        let mut mdat = 1u32.to_be_bytes().to_vec();
        mdat.extend_from_slice(b"mdat");
        mdat.extend_from_slice(&(16u64 + 1000).to_be_bytes());
        mdat.extend_from_slice(&[0u8; 1000]);
        let bytes = [boxed(b"ftyp", b"isom\0\0\0\0"), mdat, boxed(b"moov", moov_body)].concat();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn the_video_tracks_first_non_empty_edit_gives_the_start() {
        // Rule: the start is the video track's first edit with a media time (an empty edit, -1, is a pause, not a start), in the track's own timescale; audio tracks are not read for it.
        let dir = tempfile::tempdir().unwrap();
        let audio = trak(b"soun", 44100, Some(&[(1000, 441_000)]));
        let video = trak(b"vide", 15360, Some(&[(100, -1), (135_426, 54_723)]));
        let path = write_mp4(dir.path(), &[boxed(b"mvhd", &[0u8; 100]), audio, video].concat());
        let start = video_edit(&path).expect("an edit list").start_s;
        assert!((start - 54_723.0 / 15_360.0).abs() < 1e-9, "{start}");
    }

    fn stbl(stts: &[(u32, u32)], stss: Option<&[u32]>) -> Vec<u8> {
        let mut t = vec![0u8; 4];
        t.extend_from_slice(&(stts.len() as u32).to_be_bytes());
        for (count, delta) in stts {
            t.extend_from_slice(&count.to_be_bytes());
            t.extend_from_slice(&delta.to_be_bytes());
        }
        let mut body = boxed(b"stts", &t);
        if let Some(keys) = stss {
            let mut k = vec![0u8; 4];
            k.extend_from_slice(&(keys.len() as u32).to_be_bytes());
            keys.iter().for_each(|n| k.extend_from_slice(&n.to_be_bytes()));
            body.extend(boxed(b"stss", &k));
        }
        boxed(b"minf", &boxed(b"stbl", &body))
    }

    fn mvhd_v0(timescale: u32, duration: u32) -> Vec<u8> {
        let mut body = vec![0u8; 12];
        body.extend_from_slice(&timescale.to_be_bytes());
        body.extend_from_slice(&duration.to_be_bytes());
        body.extend_from_slice(&[0u8; 80]);
        boxed(b"mvhd", &body)
    }

    #[test]
    fn the_cut_is_from_the_first_keyframe_past_the_movies_duration_to_the_presentations_end() {
        // Rule: a 25 fps track of 12 s with keyframes every 4 s, presented from 3.9 s for 5.9 s: the first keyframe at or past 5.9 s of track time is at 8 s, so 9.8 - 8 = 1.8 s are predicted lost; with keyframes only at 0 and 4 s, or an edit starting at 0, nothing is.
        let dir = tempfile::tempdir().unwrap();
        let moov = |keys: &[u32], media_time: i32| {
            // 100 ticks a second, 4 a frame: 300 frames at 25 fps.
            let mdia = boxed(b"mdia", &[hdlr(b"vide"), mdhd_v0(100), stbl(&[(300, 4)], Some(keys))].concat());
            let trak = boxed(b"trak", &[boxed(b"edts", &elst_v0(&[(5900, media_time)])), mdia].concat());
            [mvhd_v0(1000, 5900), trak].concat()
        };
        let cut = video_edit(&write_mp4(dir.path(), &moov(&[1, 101, 201], 390))).unwrap().predicted_cut_s.unwrap();
        assert!((cut - 1.8).abs() < 1e-9, "{cut}");
        assert_eq!(video_edit(&write_mp4(dir.path(), &moov(&[1, 101], 390))).unwrap().predicted_cut_s, Some(0.0));
        assert_eq!(video_edit(&write_mp4(dir.path(), &moov(&[1, 101, 201], 0))).unwrap().predicted_cut_s, Some(0.0));
        assert_eq!(video_edit(&write_mp4(dir.path(), &trak(b"vide", 25, None))).and_then(|e| e.predicted_cut_s), None);
    }

    #[test]
    fn files_without_a_video_edit_list_or_an_index_have_no_start() {
        // Rule: no video edit list, no moov, a moov size past the file's end, or a non-MP4 file all give None, never a panic.
        let dir = tempfile::tempdir().unwrap();
        let no_edits = write_mp4(dir.path(), &trak(b"vide", 90000, None));
        assert_eq!(video_edit(&no_edits), None);
        let only_audio = write_mp4(dir.path(), &trak(b"soun", 48000, Some(&[(10, 100)])));
        assert_eq!(video_edit(&only_audio), None);
        let garbage = dir.path().join("x.ts");
        std::fs::write(&garbage, [0x47u8; 188 * 4]).unwrap();
        assert_eq!(video_edit(&garbage), None);
        let mut lying = boxed(b"ftyp", b"isom");
        lying.extend_from_slice(&u32::MAX.to_be_bytes());
        lying.extend_from_slice(b"moov");
        std::fs::write(&garbage, &lying).unwrap();
        assert_eq!(video_edit(&garbage), None);
        assert_eq!(video_edit(&dir.path().join("missing.mp4")), None);
    }
}
