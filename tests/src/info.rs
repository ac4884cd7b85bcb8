//! INFO replies, read over a raw connection.

use std::collections::HashMap;

use crate::Raw;

/// The text of `INFO <sections>` (`sections` may be empty: the default
/// sections), without the bulk string's framing.
///
/// # Panics
/// When the reply is not a bulk string.
pub fn info(c: &mut Raw, sections: &str) -> String {
    let reply = c.call(format!("INFO {sections}").trim_end());
    // A bulk string: `$<len>\r\n<text>\r\n`.
    let body = reply.split_once("\r\n").expect("bulk header").1;
    body.strip_suffix("\r\n").expect("bulk end").to_string()
}

/// INFO text as `field -> value` (`# Section` headers and blank lines left out).
pub fn info_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
        .collect()
}
