//! Pinned host memory for the ring's frame buffers ([`crate::host_memory`]):
//! portable (usable from every GPU's context), cached (the CPU reads and
//! writes frames: decoding into them, annotating, encoding from them).

use std::sync::Arc;

use cudarc::driver::{CudaContext, result, sys};

use super::device::CudaDevice;
use crate::host_memory::HostAllocator;

pub struct PinnedFrames {
    ctx: Arc<CudaContext>,
}

impl PinnedFrames {
    pub fn new(device: &CudaDevice) -> Self {
        PinnedFrames { ctx: device.ctx.clone() }
    }
}

impl HostAllocator for PinnedFrames {
    fn alloc(&self, len: usize) -> Option<*mut u8> {
        // Ring threads are not the workers': the context must be current here.
        self.ctx.bind_to_thread().ok()?;
        // SAFETY: a plain allocation; the memory is owned by the caller.
        match unsafe { result::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE) } {
            Ok(ptr) => Some(ptr.cast()),
            Err(e) => {
                tracing::warn!("pinned frame buffer of {len} bytes refused ({e}); this one stays pageable");
                None
            }
        }
    }

    unsafe fn free(&self, ptr: *mut u8) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the caller passes what `alloc` returned, once.
            if let Err(e) = unsafe { result::free_host(ptr.cast()) } {
                tracing::warn!("freeing a pinned frame buffer failed: {e}");
            }
        }
    }
}
