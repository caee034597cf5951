//! Reading texts: one per line (an empty line is an empty text, so line i is row i), or JSON
//! lines with a `text` field and an optional `id`. Invalid UTF-8 is an error naming the line.

use std::io::BufRead;

use anyhow::{Context, Result, bail};

/// One input record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub text: String,
    pub id: Option<serde_json::Value>,
    /// A JSON line's `text_pair`: the second text of a pair (`predict` scores it with `text`).
    pub pair: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// One text per line.
    Lines,
    /// One JSON object per line: {"text": "...", "id": ...}.
    Jsonl,
}

/// Reads records one at a time from `reader`, counting lines for error messages.
#[derive(Debug)]
pub struct Records<R> {
    reader: R,
    format: InputFormat,
    line: usize,
    buf: Vec<u8>,
    /// Bytes consumed so far (for progress).
    pub bytes: u64,
}

impl<R: BufRead> Records<R> {
    pub fn new(reader: R, format: InputFormat) -> Self {
        Self { reader, format, line: 0, buf: Vec::new(), bytes: 0 }
    }

    /// The next record, `None` at the end.
    pub fn next_record(&mut self, source: &str) -> Result<Option<Record>> {
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf).with_context(|| format!("read {source}"))?;
        if n == 0 {
            return Ok(None);
        }
        self.bytes += n as u64;
        self.line += 1;
        let mut bytes: &[u8] = &self.buf;
        if let Some(rest) = bytes.strip_suffix(b"\n") {
            bytes = rest;
        }
        if let Some(rest) = bytes.strip_suffix(b"\r") {
            bytes = rest;
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            bail!(
                "{source}: line {} is not valid UTF-8; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
                self.line
            );
        };
        match self.format {
            InputFormat::Lines => Ok(Some(Record { text: text.to_owned(), id: None, pair: None })),
            InputFormat::Jsonl => {
                parse_json_line(text).map(Some).with_context(|| format!("{source}: line {}", self.line))
            }
        }
    }
}

/// Parses one JSON line: an object with a string `text`, any `id` and, as transformers'
/// text-classification pipeline takes a pair, an optional string `text_pair`.
pub fn parse_json_line(line: &str) -> Result<Record> {
    let value: serde_json::Value = serde_json::from_str(line).context("not valid JSON")?;
    let obj = value.as_object().context("expected a JSON object with a \"text\" field")?;
    let text = obj.get("text").and_then(|t| t.as_str()).context("expected a string field \"text\"")?;
    let pair = match obj.get("text_pair") {
        None | Some(serde_json::Value::Null) => None,
        Some(p) => Some(p.as_str().context("expected \"text_pair\" to be a string")?.to_owned()),
    };
    Ok(Record { text: text.to_owned(), id: obj.get("id").cloned(), pair })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], format: InputFormat) -> Result<Vec<Record>> {
        let mut r = Records::new(input, format);
        let mut out = Vec::new();
        while let Some(rec) = r.next_record("input")? {
            out.push(rec);
        }
        Ok(out)
    }

    #[test]
    fn lines_keep_empty_lines_and_strip_crlf() {
        let recs = all(b"a\n\nb\r\nc", InputFormat::Lines).expect("read");
        let texts: Vec<&str> = recs.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["a", "", "b", "c"]);
        assert!(all(b"", InputFormat::Lines).expect("empty").is_empty());
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let e = all(b"ok\nfine\nbad \xff here\n", InputFormat::Lines).unwrap_err().to_string();
        assert!(e.contains("line 3 is not valid UTF-8"), "{e}");
    }

    #[test]
    fn jsonl_text_and_id() {
        let recs = all(b"{\"id\": 7, \"text\": \"hi\"}\n{\"text\": \"\"}\n", InputFormat::Jsonl).expect("read");
        assert_eq!(recs[0], Record { text: "hi".into(), id: Some(serde_json::json!(7)), pair: None });
        assert_eq!(recs[1].id, None);
        let e = format!("{:#}", all(b"{\"text\": 1}\n", InputFormat::Jsonl).unwrap_err());
        assert!(e.contains("line 1") && e.contains("\"text\""), "{e}");
        let recs = all(b"{\"text\": \"q\", \"text_pair\": \"d\"}\n", InputFormat::Jsonl).expect("a pair");
        assert_eq!(recs[0].pair.as_deref(), Some("d"));
        let e = format!("{:#}", all(b"{\"text\": \"q\", \"text_pair\": 2}\n", InputFormat::Jsonl).unwrap_err());
        assert!(e.contains("\"text_pair\" to be a string"), "{e}");
    }
}
