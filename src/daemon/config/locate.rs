//! Where in a TOML file a key is written, so config errors can name the
//! line, and the known key nearest to a misspelt one ("did you mean").
//! The merged configuration has lost where each value came from, so errors
//! that name a key (`streams[0].output.file`) are looked up again in the
//! text of each file read.

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

/// A file read for the configuration and its text.
#[derive(Clone, Debug)]
pub(super) struct FileText {
    pub path: PathBuf,
    pub text: String,
}

impl FileText {
    /// `path`'s text, when it can be read.
    pub(super) fn read(path: &Path) -> Option<FileText> {
        std::fs::read_to_string(path).ok().map(|text| FileText { path: path.to_path_buf(), text })
    }

    /// "FILE, line N" for `key` (a dotted path as errors name it), when
    /// the file writes it.
    pub(super) fn locate(&self, key: &str) -> Option<String> {
        line_of(&self.text, key).map(|n| format!("{}, line {n}", self.path.display()))
    }
}

/// The first of `files` (most significant first) that writes `key`, as "FILE, line N".
pub(super) fn locate_in(files: &[FileText], key: &str) -> Option<String> {
    files.iter().find_map(|f| f.locate(key))
}

/// One step of a dotted key path.
#[derive(Debug, PartialEq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `streams[0].output.file` as its steps; None if it is not such a path.
fn steps(key: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            out.push(Step::Key(name));
        }
        while let Some((index, after)) = rest.split_once(']') {
            out.push(Step::Index(index.parse().ok()?));
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The 1-based line of `key` in `text`: where the key itself is written
/// (a `[[streams]]` element: its header). None when the text does not
/// parse or does not write the whole path: a line for a part of it would
/// point at something else than what the error is about.
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let steps = steps(key)?;
    let root = DeTable::parse(text).ok()?;
    let mut table: &DeTable<'_> = root.get_ref();
    let mut offset = None;
    let mut value: Option<&DeValue<'_>> = None;
    for step in &steps {
        match (step, value) {
            (Step::Key(name), None | Some(DeValue::Table(_))) => {
                if let Some(DeValue::Table(t)) = value {
                    table = t;
                }
                let (k, v) = table.get_key_value(*name)?;
                offset = Some(k.span().start);
                value = Some(v.get_ref());
            }
            (Step::Index(i), Some(DeValue::Array(items))) => {
                let item = items.get(*i)?;
                offset = Some(item.span().start);
                value = Some(item.get_ref());
            }
            _ => return None,
        }
    }
    let offset = offset?;
    Some(text[..offset.min(text.len())].matches('\n').count() + 1)
}

/// The one of `known` closest to `word`, if it is close enough to be a
/// slip of the keyboard: at most 1 edit for short words, 2 from 5 letters
/// (a swapped pair of letters counts as one).
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if word.chars().count() >= 5 { 2 } else { 1 };
    known
        .into_iter()
        .map(|k| (edit_distance(&word.to_ascii_lowercase(), &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Optimal string alignment distance: insertions, deletions, substitutions
/// and swaps of neighbours each cost 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for j in 0..=b.len() {
        d[0][j] = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[model]\nwidth = 224\n\n[[streams]]\nname = \"a\"\n\n[[streams]]\nname = \"b\"\n[streams.output]\nsegment_second = 4\n";

    #[test]
    fn keys_are_found_on_their_lines() {
        assert_eq!(line_of(TEXT, "model.width"), Some(2));
        assert_eq!(line_of(TEXT, "model"), Some(1));
        assert_eq!(line_of(TEXT, "streams[1].name"), Some(8));
        assert_eq!(line_of(TEXT, "streams[1].output.segment_second"), Some(10));
        assert_eq!(line_of(TEXT, "model.height"), None, "not written: no line");
        assert_eq!(line_of(TEXT, "streams[2]"), None);
        assert_eq!(line_of("[model\n", "model"), None, "does not parse");
        let inline = "model = { width = 3 }\nstreams = [{ name = \"x\" }]\n";
        assert_eq!((line_of(inline, "model.width"), line_of(inline, "streams[0].name")), (Some(1), Some(2)));
    }

    #[test]
    fn a_slip_of_the_keyboard_finds_the_key_meant() {
        let known = ["file", "segment_seconds", "rtsp", "stats", "bitrate_kbps", "retain_hours"];
        assert_eq!(nearest("segment_second", known), Some("segment_seconds"));
        assert_eq!(nearest("stast", known), Some("stats"), "swapped letters");
        assert_eq!(nearest("fil", known), Some("file"));
        assert_eq!(nearest("colour", known), None, "nothing close");
        assert_eq!(nearest("widht", ["path", "width", "height"]), Some("width"));
    }
}
