//! Reading the layers: defaults < system file < given file < environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ::config::{Config, Environment, File, FileFormat};

use crate::video::uri::redact_text;
use super::locate::{FileText, locate_in, nearest};
use super::{ConfigError, DaemonConfig, ENV_PREFIX, ENV_SEPARATOR, SYSTEM_CONFIG};

/// Which layers to read; [`Sources::standard`] is what the daemon uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sources {
    /// Read when it exists (`None`: skipped).
    pub system: Option<PathBuf>,
    /// Required when given.
    pub file: Option<PathBuf>,
    /// `None`: the process environment. Tests pass their own map.
    pub env: Option<BTreeMap<String, String>>,
}

impl Sources {
    pub fn standard(file: Option<&Path>) -> Self {
        Sources { system: Some(PathBuf::from(SYSTEM_CONFIG)), file: file.map(Path::to_path_buf), env: None }
    }

    /// The system file, unless it is missing or is the given file itself
    /// (`--config /etc/roadseg/roadseg.toml`, as the unit does).
    fn system_layer(&self) -> Option<&Path> {
        let system = self.system.as_deref().filter(|p| p.is_file())?;
        let same = |f: &Path| match (system.canonicalize(), f.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => system == f,
        };
        if self.file.as_deref().is_some_and(same) { None } else { Some(system) }
    }

    /// The files read, the one that wins first, with their text: where
    /// errors look up the line of a key.
    pub(super) fn files(&self) -> Vec<FileText> {
        self.file.iter().filter_map(|f| FileText::read(f)).chain(self.system_layer().and_then(FileText::read)).collect()
    }

    /// Whether the environment sets `key` (a dotted path): then a file's
    /// line for it would point at a value that lost.
    pub(super) fn env_sets(&self, key: &str) -> bool {
        let var = format!("{ENV_PREFIX}{ENV_SEPARATOR}{}", key.split('[').next().unwrap_or(key).replace('.', ENV_SEPARATOR)).to_ascii_uppercase();
        let matches = |k: &str| k.to_ascii_uppercase() == var;
        match &self.env {
            Some(vars) => vars.keys().any(|k| matches(k)),
            None => std::env::vars_os().any(|(k, _)| k.to_str().is_some_and(matches)),
        }
    }

    /// "FILE, line N" where a file writes `key`, unless the environment overrides it.
    pub(super) fn locate(&self, files: &[FileText], key: &str) -> Option<String> {
        if self.env_sets(key) { None } else { locate_in(files, key) }
    }

    /// The layers that will be read, lowest first, for messages.
    pub fn describe(&self) -> String {
        let mut layers = vec!["defaults".to_string()];
        layers.extend(self.system_layer().map(|p| p.display().to_string()));
        layers.extend(self.file.as_ref().map(|p| p.display().to_string()));
        layers.push(format!("environment ({ENV_PREFIX}{ENV_SEPARATOR}*)"));
        layers.join(" < ")
    }
}

impl ConfigError {
    /// `err` worded with its key's full path and a "did you mean" for an
    /// unknown key; `at` finds the file and line that write the key
    /// (`origin`, the layers read, when none does).
    fn parse(origin: &str, err: ::config::ConfigError, at: impl Fn(&str) -> Option<String>) -> ConfigError {
        let (message, key) = explain(&dotted_keys(&err.to_string()));
        let origin = key.and_then(|k| at(&k)).unwrap_or_else(|| origin.to_string());
        // Parser messages may quote the offending line, credentials and all.
        ConfigError::Parse { origin, message: redact_text(&message) }
    }
}

/// The key a deserialisation error is about, and its message, an unknown
/// key reworded to name its whole path and the known key it is closest to:
/// serde's "unknown field `segment_second`, expected one of `file`, ...
/// for key `streams[0].output`" becomes "unknown key
/// `streams[0].output.segment_second`: did you mean `segment_seconds`?
/// (expected one of `file`, ...)".
fn explain(message: &str) -> (String, Option<String>) {
    let quoted_after = |text: &str, open: &str| {
        let start = text.find(open)? + open.len();
        Some(text[start..start + text[start..].find('`')?].to_string())
    };
    let parent = quoted_after(message, "for key `");
    let Some(field) = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next()) else {
        return (message.to_string(), parent);
    };
    let key = match &parent {
        Some(p) => format!("{p}.{field}"),
        None => field.to_string(),
    };
    let expected = message.find("expected").map(|i| message[i..].split(" for key `").next().unwrap_or_default().trim_end_matches(',')).unwrap_or_default();
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let hint = nearest(field, known).map(|k| format!(": did you mean `{k}`?")).unwrap_or_default();
    let expected = if expected.is_empty() { String::new() } else { format!(" ({expected})") };
    (format!("unknown key `{key}`{hint}{expected}"), Some(key))
}

/// The config crate writes nested keys as `streams[0]output`; make them the
/// `streams[0].output` that `validate()` and the docs use.
fn dotted_keys(message: &str) -> String {
    let quoted = [("for key `", '`'), ("missing configuration field \"", '"')];
    let Some((start, close)) = quoted.iter().find_map(|(open, close)| Some((message.find(open)? + open.len(), *close))) else {
        return message.to_string();
    };
    let end = message[start..].find(close).map_or(message.len(), |i| start + i);
    let mut key = String::with_capacity(end - start + 4);
    let mut prev = ' ';
    for c in message[start..end].chars() {
        if prev == ']' && c != '[' && c != '.' {
            key.push('.');
        }
        key.push(c);
        prev = c;
    }
    format!("{}{key}{}", &message[..start], &message[end..])
}

/// TOML syntax, checked by the toml crate first: through the config crate
/// some errors ("number too large to fit in target type") lose their line
/// and column. Messages are redacted: they quote the offending line.
fn check_syntax(text: &str, origin: &str) -> Result<(), ConfigError> {
    text.parse::<toml::Table>()
        .map(|_| ())
        .map_err(|e| ConfigError::Parse { origin: origin.to_string(), message: redact_text(e.to_string().trim_end()) })
}

impl DaemonConfig {
    /// Defaults < [`SYSTEM_CONFIG`] (if present) < `path` (required when
    /// given) < `ROADSEG__*` environment. Not validated: call `validate()`.
    pub fn load(path: Option<&Path>) -> Result<DaemonConfig, ConfigError> {
        Self::load_from(&Sources::standard(path))
    }

    pub fn load_from(sources: &Sources) -> Result<DaemonConfig, ConfigError> {
        let mut builder = Config::builder();
        if let Some(system) = sources.system_layer() {
            if let Ok(text) = std::fs::read_to_string(system) {
                check_syntax(&text, &system.display().to_string())?;
            }
            builder = builder.add_source(File::from(system).format(FileFormat::Toml));
        }
        if let Some(file) = &sources.file {
            // Checked here: the config crate's own message does not say which layer.
            if !file.is_file() {
                return Err(ConfigError::NotFound(file.clone()));
            }
            if let Ok(text) = std::fs::read_to_string(file) {
                check_syntax(&text, &file.display().to_string())?;
            }
            builder = builder.add_source(File::from(file.as_path()).format(FileFormat::Toml));
        }
        // No `try_parsing`: values stay strings and each field converts its
        // own ("2" to an integer where one is expected). Parsing up front
        // would turn a password like "0012" into the number 12, then "12".
        let mut env = Environment::with_prefix(ENV_PREFIX).separator(ENV_SEPARATOR);
        if let Some(vars) = &sources.env {
            env = env.source(Some(vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
        }
        let origin = sources.describe();
        let files = sources.files();
        let parse = |err| ConfigError::parse(&origin, err, |key: &str| sources.locate(&files, key));
        let mut config: DaemonConfig = builder.add_source(env).build().map_err(parse)?.try_deserialize().map_err(parse)?;
        // Not found: the default stays, and validation lists where it was looked for.
        if let Ok(found) = crate::checkpoint::locate_model(&config.model.path) {
            config.model.path = found;
        }
        Ok(config)
    }

    /// Defaults < `text` (TOML); `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<DaemonConfig, ConfigError> {
        check_syntax(text, origin)?;
        let files = [FileText { path: origin.into(), text: text.to_string() }];
        let parse = |err| ConfigError::parse(origin, err, |key: &str| locate_in(&files, key));
        Config::builder()
            .add_source(File::from_str(text, FileFormat::Toml))
            .build()
            .map_err(parse)?
            .try_deserialize()
            .map_err(parse)
    }

}
