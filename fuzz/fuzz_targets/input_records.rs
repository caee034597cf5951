//! The CLI's line and JSON-lines reader: any bytes give records or an error naming a line, never a
//! panic; as lines, the records are exactly the input's lines.
#![no_main]

use nornir_cli::input::{InputFormat, Records};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for format in [InputFormat::Lines, InputFormat::Jsonl] {
        let mut records = Records::new(data, format);
        let mut n = 0usize;
        loop {
            match records.next_record("fuzz input") {
                Ok(Some(_)) => n += 1,
                Ok(None) => break,
                Err(e) => {
                    assert!(format!("{e:#}").contains("line "), "{e:#}");
                    return;
                }
            }
        }
        if format == InputFormat::Lines {
            let lines = data.split(|&b| b == b'\n').count() - usize::from(data.ends_with(b"\n") || data.is_empty());
            assert_eq!(n, lines);
        }
    }
});
