//! Where the bundled model is found when roadseg runs from anywhere (a
//! systemd unit, an installed package, a source build started from another
//! directory), not only from its source tree.

use std::fmt;
use std::path::{Path, PathBuf};

/// The bundled model's folder as configured by default: relative, so a
/// source checkout finds it from its root.
pub const BUNDLED_MODEL: &str = "models/roadseg-camvid";
/// Where the Debian package installs it.
pub const SYSTEM_MODEL: &str = "/usr/share/roadseg/models/roadseg-camvid";
/// Names a model folder that overrides the bundled default.
pub const MODEL_ENV: &str = "ROADSEG_MODEL";
/// The source checkout this binary was built from: a source build run from
/// another directory still finds the checkout's model. On an installed
/// machine the build directory does not exist and this is skipped.
const CHECKOUT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/roadseg-camvid");

/// The bundled model was asked for and none of the places it may be holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelNotFound {
    /// Every folder tried, in the order tried.
    pub searched: Vec<PathBuf>,
}

impl fmt::Display for ModelNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot find the bundled model {BUNDLED_MODEL} (a folder with config.json); searched, in order: ")?;
        for (i, dir) in self.searched.iter().enumerate() {
            write!(f, "{}{}. {}", if i == 0 { "" } else { ", " }, i + 1, dir.display())?;
            // A relative path means little without the directory it was under.
            if let (true, Ok(cwd)) = (dir.is_relative(), std::env::current_dir()) {
                write!(f, " (under {})", cwd.display())?;
            }
        }
        write!(f, ". Pass --model DIR (daemon: [model] path), or set {MODEL_ENV}=DIR")
    }
}

/// The folders tried for the bundled default, in order: under the working
/// directory, [`SYSTEM_MODEL`], beside the binary (and `../share/roadseg/`
/// beside it, for `/usr/local`-style installs), then the source checkout the
/// binary was built from. Installed places come before the checkout so a
/// package never prefers a build tree that happens to exist.
pub fn search_path() -> Vec<PathBuf> {
    let mut candidates = vec![PathBuf::from(BUNDLED_MODEL), PathBuf::from(SYSTEM_MODEL)];
    if let Some(bin) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        candidates.push(bin.join(BUNDLED_MODEL));
        candidates.push(bin.join("../share/roadseg").join(BUNDLED_MODEL));
    }
    candidates.push(PathBuf::from(CHECKOUT_MODEL));
    candidates
}

/// `path` itself unless it is the bundled default. For the default:
/// `$ROADSEG_MODEL` when set (taken as given: a wrong one is named when it
/// fails to load), else the first folder of [`search_path`] that holds a
/// `config.json`; none is an error listing every folder tried.
pub fn locate_model(path: &Path) -> Result<PathBuf, ModelNotFound> {
    if path != Path::new(BUNDLED_MODEL) {
        return Ok(path.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    first_model(search_path())
}

fn first_model(searched: Vec<PathBuf>) -> Result<PathBuf, ModelNotFound> {
    match searched.iter().find(|c| c.join("config.json").is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(ModelNotFound { searched }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkout_is_searched_last_and_a_miss_lists_every_place_in_order() {
        // Rule: the default model is searched in cwd, the package's folder, beside the binary, then the source checkout; the error names every place tried, numbered in order.
        let path = search_path();
        assert_eq!(path.first(), Some(&PathBuf::from(BUNDLED_MODEL)));
        assert_eq!(path[1], PathBuf::from(SYSTEM_MODEL));
        assert_eq!(path.last(), Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join(BUNDLED_MODEL)));
        // This checkout has its model, so the default is found from here whatever the cwd.
        if std::env::var_os(MODEL_ENV).is_none() {
            let found = locate_model(Path::new(BUNDLED_MODEL)).unwrap();
            assert!(found.join("config.json").is_file(), "{}", found.display());
        }
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let e = first_model(vec![a.clone(), b.clone()]).unwrap_err();
        assert_eq!(e.searched, [a.clone(), b.clone()]);
        let text = e.to_string();
        let (ia, ib) = (text.find(&format!("1. {}", a.display())).unwrap(), text.find(&format!("2. {}", b.display())).unwrap());
        assert!(ia < ib && text.contains("--model") && text.contains(MODEL_ENV), "{text}");
        let relative = ModelNotFound { searched: vec![PathBuf::from(BUNDLED_MODEL)] }.to_string();
        assert!(relative.contains(&format!("1. {BUNDLED_MODEL} (under {})", std::env::current_dir().unwrap().display())), "{relative}");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("config.json"), "{}").unwrap();
        assert_eq!(first_model(vec![a, b.clone()]), Ok(b));
        let other = Path::new("/somewhere/else");
        assert_eq!(locate_model(other), Ok(other.to_path_buf()), "an explicit path is taken as given");
    }
}
