//! A small JSON writer. Its strings escape `<`, `>`, `&` and U+2028/U+2029 too, so its
//! output can sit inside an HTML `<script type="application/json">` block as is.

use std::fmt::Write as _;

/// Appends JSON to a string; commas are placed automatically.
#[derive(Debug, Default)]
pub(crate) struct JsonWriter {
    out: String,
    /// True right after `{`, `[` or a key: the next value needs no comma.
    fresh: bool,
}

impl JsonWriter {
    pub(crate) fn new() -> Self {
        Self {
            out: String::new(),
            fresh: true,
        }
    }

    fn sep(&mut self) {
        if !self.fresh {
            self.out.push(',');
        }
        self.fresh = false;
    }

    pub(crate) fn begin_object(&mut self) -> &mut Self {
        self.sep();
        self.out.push('{');
        self.fresh = true;
        self
    }

    pub(crate) fn end_object(&mut self) -> &mut Self {
        self.out.push('}');
        self.fresh = false;
        self
    }

    pub(crate) fn begin_array(&mut self) -> &mut Self {
        self.sep();
        self.out.push('[');
        self.fresh = true;
        self
    }

    pub(crate) fn end_array(&mut self) -> &mut Self {
        self.out.push(']');
        self.fresh = false;
        self
    }

    /// An object key; the value comes next.
    pub(crate) fn key(&mut self, key: &str) -> &mut Self {
        self.sep();
        push_json_string(&mut self.out, key);
        self.out.push(':');
        self.fresh = true;
        self
    }

    pub(crate) fn string(&mut self, value: &str) -> &mut Self {
        self.sep();
        push_json_string(&mut self.out, value);
        self
    }

    pub(crate) fn uint(&mut self, value: u64) -> &mut Self {
        self.sep();
        let _ = write!(self.out, "{value}");
        self
    }

    pub(crate) fn int(&mut self, value: i64) -> &mut Self {
        self.sep();
        let _ = write!(self.out, "{value}");
        self
    }

    pub(crate) fn bool(&mut self, value: bool) -> &mut Self {
        self.sep();
        self.out.push_str(if value { "true" } else { "false" });
        self
    }

    pub(crate) fn null(&mut self) -> &mut Self {
        self.sep();
        self.out.push_str("null");
        self
    }

    /// `key: value` for a string that may be missing (null).
    pub(crate) fn opt_string(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        self.key(key);
        match value {
            Some(v) => self.string(v),
            None => self.null(),
        }
    }

    /// `key: value` for a number that may be missing (null).
    pub(crate) fn opt_uint(&mut self, key: &str, value: Option<u64>) -> &mut Self {
        self.key(key);
        match value {
            Some(v) => self.uint(v),
            None => self.null(),
        }
    }

    /// `key: value` for a signed number that may be missing (null).
    pub(crate) fn opt_int(&mut self, key: &str, value: Option<i64>) -> &mut Self {
        self.key(key);
        match value {
            Some(v) => self.int(v),
            None => self.null(),
        }
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// Appends `s` as a JSON string literal that is also inert inside an HTML script block.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_nested_values_with_commas() {
        let mut w = JsonWriter::new();
        w.begin_object()
            .key("a")
            .uint(1)
            .key("b")
            .begin_array()
            .int(-2)
            .bool(true)
            .null()
            .begin_object()
            .end_object()
            .end_array()
            .opt_string("c", None)
            .opt_uint("d", Some(4))
            .end_object();
        assert_eq!(
            w.finish(),
            r#"{"a":1,"b":[-2,true,null,{}],"c":null,"d":4}"#
        );
    }

    #[test]
    fn strings_are_safe_in_script_blocks() {
        let mut s = String::new();
        push_json_string(&mut s, "</script>\"\\\n\u{1}&\u{2028}é");
        assert_eq!(s, r#""\u003c/script\u003e\"\\\n\u0001\u0026\u2028é""#);
    }
}
