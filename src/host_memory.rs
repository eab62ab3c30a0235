//! Frame memory that a GPU can copy from directly. Where a CUDA engine runs,
//! it installs an allocator of page-locked (pinned) host memory; the ring's
//! frame buffers then come from it, so the decoder's frame is copied once,
//! into the ring, and the GPU takes it from there by DMA (with pageable
//! memory the backend first copies it into pinned staging). Without an
//! allocator, or when one fails, buffers are ordinary heap memory.
//!
//! This module knows nothing of CUDA: the backend implements [`HostAllocator`].

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Page-locked host memory, from the device driver.
pub trait HostAllocator: Send + Sync {
    /// `len` (> 0) bytes, or None when the driver refuses (the caller then
    /// uses the heap).
    fn alloc(&self, len: usize) -> Option<*mut u8>;
    /// Frees what `alloc` returned.
    ///
    /// # Safety
    /// `ptr` came from this allocator's `alloc` and is not used afterwards.
    unsafe fn free(&self, ptr: *mut u8);
}

static ALLOCATOR: OnceLock<Arc<dyn HostAllocator>> = OnceLock::new();

/// Blocks handed out by the allocator, as (start, len): what [`is_pinned`] answers from.
static PINNED: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Makes later frame buffers pinned. The first allocator installed stays
/// (one process, one driver); returns whether this one was.
pub fn install(allocator: Arc<dyn HostAllocator>) -> bool {
    ALLOCATOR.set(allocator).is_ok()
}

/// Whether `bytes` lie wholly inside one pinned block.
pub fn is_pinned(bytes: &[u8]) -> bool {
    let (start, end) = (bytes.as_ptr() as usize, bytes.as_ptr() as usize + bytes.len());
    PINNED.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|&(s, len)| start >= s && end <= s + len)
}

/// A frame's bytes: pinned where an allocator is installed, else on the heap.
#[derive(Default)]
pub struct FrameMemory {
    heap: Vec<u8>,
    /// A pinned block and its size; `len` bytes of it are in use.
    pinned: Option<(*mut u8, usize)>,
    len: usize,
}

// SAFETY: the pinned block is owned by this value alone, like a Vec's buffer.
unsafe impl Send for FrameMemory {}
unsafe impl Sync for FrameMemory {}

impl FrameMemory {
    /// `len` bytes; contents are unspecified where the memory was reused
    /// (callers overwrite them), zero where it is new.
    pub fn resize(&mut self, len: usize) {
        if let Some((_, capacity)) = self.pinned {
            if len <= capacity {
                self.len = len;
                return;
            }
            self.release_pinned();
        }
        if let Some(allocator) = ALLOCATOR.get().filter(|_| len > 0) {
            if let Some(ptr) = allocator.alloc(len) {
                // SAFETY: `alloc` returned `len` writable bytes.
                unsafe { std::ptr::write_bytes(ptr, 0, len) };
                PINNED.lock().unwrap_or_else(PoisonError::into_inner).push((ptr as usize, len));
                self.heap = Vec::new();
                self.pinned = Some((ptr, len));
                self.len = len;
                return;
            }
        }
        self.heap.resize(len, 0);
        self.len = len;
    }

    pub fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    fn release_pinned(&mut self) {
        let Some((ptr, _)) = self.pinned.take() else { return };
        PINNED.lock().unwrap_or_else(PoisonError::into_inner).retain(|&(s, _)| s != ptr as usize);
        if let Some(allocator) = ALLOCATOR.get() {
            // SAFETY: the block came from this allocator (the only one ever
            // installed) and is forgotten here.
            unsafe { allocator.free(ptr) };
        }
        self.len = 0;
    }
}

impl Drop for FrameMemory {
    fn drop(&mut self) {
        self.release_pinned();
    }
}

impl Deref for FrameMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self.pinned {
            // SAFETY: the block holds at least `len` initialised bytes.
            Some((ptr, _)) => unsafe { std::slice::from_raw_parts(ptr, self.len) },
            None => &self.heap[..self.len],
        }
    }
}

impl DerefMut for FrameMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self.pinned {
            // SAFETY: as for `deref`, and `&mut self` makes the access exclusive.
            Some((ptr, _)) => unsafe { std::slice::from_raw_parts_mut(ptr, self.len) },
            None => &mut self.heap[..self.len],
        }
    }
}

impl From<Vec<u8>> for FrameMemory {
    fn from(heap: Vec<u8>) -> Self {
        let len = heap.len();
        FrameMemory { heap, pinned: None, len }
    }
}

impl std::fmt::Debug for FrameMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameMemory").field("len", &self.len).field("pinned", &self.is_pinned()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_resizes_and_reads_back() {
        // The heap path, unless the pinned test below installed its allocator first.
        let mut m = FrameMemory::default();
        m.resize(10);
        m.copy_from_slice(&[7; 10]);
        assert_eq!(&m[..], &[7; 10]);
        m.resize(4);
        assert_eq!(&m[..], &[7; 4]);
        assert_eq!(m.is_pinned(), ALLOCATOR.get().is_some());
        assert_eq!(is_pinned(&m), m.is_pinned());
        let v: FrameMemory = vec![1, 2, 3].into();
        assert_eq!(&v[..], &[1, 2, 3]);
    }

    /// Hands out heap blocks as if pinned, remembering their layouts.
    struct FakePinned(Mutex<std::collections::HashMap<usize, std::alloc::Layout>>);

    impl HostAllocator for FakePinned {
        fn alloc(&self, len: usize) -> Option<*mut u8> {
            let layout = std::alloc::Layout::from_size_align(len, 4096).ok()?;
            // SAFETY: len > 0 (FrameMemory never asks for 0).
            let ptr = unsafe { std::alloc::alloc(layout) };
            self.0.lock().unwrap().insert(ptr as usize, layout);
            Some(ptr)
        }
        unsafe fn free(&self, ptr: *mut u8) {
            let layout = self.0.lock().unwrap().remove(&(ptr as usize)).expect("freed once, after alloc");
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
        }
    }

    #[test]
    fn pinned_memory_is_reused_while_it_fits_and_freed_once() {
        // Rule: with an allocator installed, frame buffers come from it, shrink and regrow in place, move to a new block only when larger, and give each block back exactly once.
        let fake = Arc::new(FakePinned(Mutex::new(Default::default())));
        if !install(fake.clone()) {
            return crate::test_skip::skip("another allocator was installed first in this process");
        }
        let mut m = FrameMemory::default();
        m.resize(1000);
        assert!(m.is_pinned() && is_pinned(&m));
        m.copy_from_slice(&[9; 1000]);
        let first = m.as_ptr();
        m.resize(600);
        m.resize(1000);
        assert_eq!(m.as_ptr(), first, "shrinking and regrowing keeps the block");
        assert_eq!(m[999], 9);
        m.resize(5000);
        assert_ne!(m.as_ptr(), first);
        assert!(!fake.0.lock().unwrap().contains_key(&(first as usize)), "the smaller block went back");
        assert!(is_pinned(&m[100..200]) && !is_pinned(&[0u8; 8]));
        let last = m.as_ptr() as usize;
        drop(m);
        assert!(!fake.0.lock().unwrap().contains_key(&last), "dropping gives the block back");
    }
}
