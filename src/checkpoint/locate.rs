//! Where the bundled model is found when roadseg runs from anywhere (a
//! systemd unit, an installed package), not only from its source tree.

use std::path::{Path, PathBuf};

/// The bundled model's folder as configured by default: relative, so a
/// source checkout finds it from its root.
pub const BUNDLED_MODEL: &str = "models/roadseg-camvid";
/// Where the Debian package installs it.
pub const SYSTEM_MODEL: &str = "/usr/share/roadseg/models/roadseg-camvid";
/// Names a model folder that overrides the bundled default.
pub const MODEL_ENV: &str = "ROADSEG_MODEL";

/// `path` itself unless it is the bundled default; for the default, the
/// first that exists of: `$ROADSEG_MODEL`, the default under the working
/// directory, [`SYSTEM_MODEL`], and the default beside the binary (also
/// `../share/roadseg/...` beside it, for `/usr/local`-style installs). When
/// none exists the default is returned, so the error names what was asked.
pub fn locate_model(path: &Path) -> PathBuf {
    if path != Path::new(BUNDLED_MODEL) {
        return path.to_path_buf();
    }
    if let Some(dir) = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let beside_binary = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf));
    let mut candidates = vec![path.to_path_buf(), PathBuf::from(SYSTEM_MODEL)];
    if let Some(bin) = beside_binary {
        candidates.push(bin.join(BUNDLED_MODEL));
        candidates.push(bin.join("../share/roadseg").join(BUNDLED_MODEL));
    }
    candidates.into_iter().find(|c| c.join("config.json").is_file()).unwrap_or_else(|| path.to_path_buf())
}
