//! What a model folder's card (README.md) says of the model in its YAML front matter, read as the
//! hub reads it: the `pipeline_tag` between the opening and closing `---` lines. Bounded: the
//! folder is untrusted, so only the card's first `MAX_CARD_BYTES` are read.

use std::io::Read;
use std::path::Path;

/// How much of README.md is read: front matter is a few hundred bytes; the hub's own limit on a
/// card's metadata is far below this.
const MAX_CARD_BYTES: u64 = 64 * 1024;

/// The `pipeline_tag` of `dir/README.md`'s front matter, if it has one.
pub(crate) fn pipeline_tag(dir: &Path) -> Option<String> {
    let mut text = String::new();
    let file = std::fs::File::open(dir.join("README.md")).ok()?;
    file.take(MAX_CARD_BYTES).read_to_string(&mut text).ok()?;
    front_matter_value(&text, "pipeline_tag")
}

/// A top-level scalar `key: value` of YAML front matter (quotes removed), where `text` starts
/// with a `---` line and the key comes before the closing `---` line.
fn front_matter_value(text: &str, key: &str) -> Option<String> {
    let mut lines = text.strip_prefix('\u{feff}').unwrap_or(text).lines();
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    for line in lines {
        if line.trim_end() == "---" {
            return None;
        }
        // Top-level keys start in the first column; a nested `pipeline_tag:` is another's.
        let Some(rest) = line.strip_prefix(key).and_then(|r| r.strip_prefix(':')) else { continue };
        let value = rest.split(" #").next().unwrap_or("").trim();
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        return (!value.is_empty()).then(|| value.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::front_matter_value;

    #[test]
    fn the_pipeline_tag_is_read_from_the_front_matter_only() {
        let tag = |text: &str| front_matter_value(text, "pipeline_tag");
        let card = "---\nlicense: apache-2.0\nbase_model:\n- Qwen/Qwen3-0.6B\npipeline_tag: text-ranking\n---\n# Qwen3-Reranker\n";
        assert_eq!(tag(card).as_deref(), Some("text-ranking"));
        assert_eq!(tag("---\npipeline_tag: \"text-ranking\" # the hub's tag\n---\n").as_deref(), Some("text-ranking"));
        assert_eq!(
            tag("\u{feff}---\r\npipeline_tag: feature-extraction\r\n---\r\n").as_deref(),
            Some("feature-extraction")
        );
        assert_eq!(tag("# A card\npipeline_tag: text-ranking\n"), None, "not front matter");
        assert_eq!(tag("---\nlicense: mit\n---\npipeline_tag: text-ranking\n"), None, "after the front matter");
        assert_eq!(tag("---\nwidget:\n  pipeline_tag: text-ranking\n---\n"), None, "nested");
        assert_eq!(tag("---\npipeline_tag:\n---\n"), None);
        assert_eq!(tag(""), None);
    }
}
