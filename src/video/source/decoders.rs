//! Hardware video decoders: preferred by rank, or skipped per pipeline.
//!
//! decodebin picks the highest-ranked decoder for a stream. Some hardware decoders
//! ship below the software ones (the `va` decoders have rank NONE in 1.22), so with
//! `prefer_hardware` their rank is raised to PRIMARY+1, process-wide, once. A source
//! with `prefer_hardware = false` does not touch ranks (another source may want the
//! GPU): its uridecodebin answers SKIP in `autoplug-select` for every hardware
//! decoder instead, so only that pipeline falls back to software.

use std::sync::Once;

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;

/// Decoders that are hardware even where their klass does not say so.
const KNOWN: &[&str] = &[
    "nvh264dec",
    "nvh265dec",
    "nvav1dec",
    "nvvp9dec",
    "nvjpegdec",
    "nvv4l2decoder",
    "vah264dec",
    "vah265dec",
    "vaav1dec",
    "vavp9dec",
    "vaapih264dec",
    "vaapih265dec",
    "vaapidecodebin",
    "v4l2h264dec",
    "v4l2h265dec",
    "qsvh264dec",
    "qsvh265dec",
];

/// The video decoder a source's decodebin picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecoderInfo {
    /// The GStreamer element's factory name (`nvh264dec`, `avdec_h264`, ...).
    pub name: String,
    /// A GPU or SoC decoder (NVDEC, VA-API, V4L2, Quick Sync), not the CPU.
    pub hardware: bool,
}

impl DecoderInfo {
    /// Where decoded frames reach roadseg: always host ("system") memory
    /// today. A hardware decoder's frames are copied out of GPU memory by
    /// GStreamer, and the CUDA backend copies them back up; taking them in
    /// place (`memory:CUDAMemory`) is not built.
    pub const MEMORY: &'static str = "system";
}

/// Calls `report` with each video decoder that `dec` (a uridecodebin) adds,
/// on its streaming thread: once a run of the pipeline, again after a
/// reconnect or a change of codec.
pub(super) fn report_decoders(dec: &gst::Element, report: impl Fn(DecoderInfo) + Send + Sync + 'static) {
    dec.connect("deep-element-added", false, move |args| {
        let element = args.get(2).and_then(|v| v.get::<gst::Element>().ok());
        if let Some(factory) = element.as_ref().and_then(|e| e.factory()) {
            let klass = factory.klass();
            if klass.contains("Decoder") && klass.contains("Video") {
                report(DecoderInfo { name: factory.name().to_string(), hardware: is_hardware(&factory) });
            }
        }
        None
    });
}

pub(super) fn is_hardware(f: &gst::ElementFactory) -> bool {
    let klass = f.klass();
    (klass.contains("Decoder") && klass.contains("Hardware")) || KNOWN.contains(&f.name().as_str())
}

pub(super) fn raise_ranks_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let wanted = i32::from(gst::Rank::PRIMARY) + 1;
        let decoders = gst::ElementFactory::factories_with_type(
            gst::ElementFactoryType::DECODER | gst::ElementFactoryType::MEDIA_VIDEO,
            gst::Rank::NONE,
        );
        for f in decoders.iter().filter(|f| is_hardware(f)) {
            if i32::from(f.rank()) < wanted {
                tracing::debug!(decoder = %f.name(), "raising rank so decodebin prefers it");
                f.set_rank(gst::Rank::from(wanted));
            }
        }
    });
}

/// Makes `dec` (a uridecodebin) skip hardware decoders.
pub(super) fn skip_hardware(dec: &gst::Element) {
    // GstAutoplugSelectResult lives in the playback plugin, registered once a
    // uridecodebin exists, so it is looked up by name rather than linked against.
    let Some(result_type) = glib::Type::from_name("GstAutoplugSelectResult") else {
        tracing::warn!("GstAutoplugSelectResult is not registered; hardware decoders stay allowed");
        return;
    };
    dec.connect("autoplug-select", false, move |args| {
        let hw = args.get(3).and_then(|v| v.get::<gst::ElementFactory>().ok()).is_some_and(|f| is_hardware(&f));
        // 0 = TRY, 2 = SKIP
        glib::EnumClass::with_type(result_type).and_then(|c| c.to_value(if hw { 2 } else { 0 }))
    });
}
