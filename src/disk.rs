//! Free space on the filesystem a recording writes to: retention deletes
//! old segments against it, and a recording paused by a full disk waits
//! for it before starting a new file.

use std::path::Path;

/// Bytes available to this process on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    (rc == 0).then(|| s.f_bavail as u64 * s.f_frsize as u64)
}

/// [`free_bytes`] of the nearest folder of `path` that exists (a recording's
/// folder may not exist yet, or hold strftime fields).
pub fn free_bytes_near(path: &Path) -> Option<u64> {
    path.ancestors().skip(1).find(|d| d.is_dir()).and_then(free_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_from_the_nearest_existing_folder() {
        // Rule: a path under folders not made yet reads the free space of the closest one that exists.
        let dir = tempfile::tempdir().unwrap();
        let here = free_bytes(dir.path()).expect("statvfs of a temp dir");
        let deep = free_bytes_near(&dir.path().join("cam/%Y/%m/x.mp4")).expect("an existing ancestor");
        assert!(here > 0 && deep > 0);
        assert_eq!(free_bytes(&dir.path().join("missing")), None);
    }
}
