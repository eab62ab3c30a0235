//! What a kernel launch needs, apart from the backend that owns it: the
//! worker's stream and the compiled kernels. The frame arena launches
//! through a [`Queue`] too, so `frame.rs` needs nothing from `backend.rs`
//! (which only uses the arena).

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};

use super::kernels::Ops;

/// A worker's stream and the kernels it launches, borrowed from its backend.
pub(crate) struct Queue<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub ops: &'a Ops,
}

/// Enqueues kernel `$f` on `$q.stream` (a backend or a [`Queue`]) with the
/// given arguments.
macro_rules! launch {
    ($q:ident, $f:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let mut builder = $q.stream.launch_builder($f);
        $( builder.arg($arg); )+
        // SAFETY: every launch site passes the kernel's exact parameter list
        // (kernels/*.cu) with buffers whose lengths were checked against the
        // dimensions beforehand.
        unsafe { builder.launch($cfg) }.map(|_| ()).map_err($crate::backend::BackendError::from)
    }};
}

pub(crate) use launch;

/// Threads per block of the elementwise kernels.
pub(crate) const BLOCK: u32 = 256;

pub(crate) fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, 1 << 30) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}
