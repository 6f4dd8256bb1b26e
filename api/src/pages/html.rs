//! HTML building blocks: escaping, the page layout (with its security headers) and the
//! error page. Every dynamic value goes through [`esc`] or [`json_script`].

use warp::http::StatusCode;

use crate::http::reply::Resp;

/// Escapes text for HTML element content and double-quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A `<script type="application/json">` block the page's JS reads its settings from. `<` is
/// escaped as `\u003c` so no value can close the element.
pub fn json_script(id: &str, value: &serde_json::Value) -> String {
    let json = serde_json::to_string(value)
        .unwrap_or_else(|_| "{}".into())
        .replace('<', "\\u003c");
    format!(
        "<script type=\"application/json\" id=\"{}\">{json}</script>",
        esc(id)
    )
}

/// Scripts only from our origin, no inline script, no framing: the checkout page asks a wallet
/// to move money, so it must not be framed (clickjacking) or run injected code. The URL
/// carries the link's signature and customer id, so it is never sent as a referrer.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// A whole HTML page with our stylesheet, `body` as its main content and `scripts` (asset
/// names under `/assets/`) at the end.
pub fn page(status: StatusCode, title: &str, body: &str, scripts: &[&str]) -> Resp {
    let scripts: String = scripts
        .iter()
        .map(|s| format!("<script src=\"/assets/{}\" defer></script>", esc(s)))
        .collect();
    let html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title} · Chainsub</title>\n\
         <link rel=\"icon\" href=\"data:,\">\n<link rel=\"stylesheet\" href=\"/assets/style.css\">\n{scripts}\n</head>\n\
         <body>\n<header class=\"top\"><span class=\"brand\">Chainsub</span></header>\n\
         <main id=\"main\">\n{body}\n</main>\n</body>\n</html>\n",
        title = esc(title),
    );
    let mut resp = Resp::raw("text/html; charset=utf-8", html);
    resp.status = status;
    resp.header("content-security-policy", CSP)
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
}

/// A page that explains what went wrong and what to do, with an honest status.
pub fn error_page(status: StatusCode, title: &str, detail: &str) -> Resp {
    let body = format!(
        "<section class=\"card error\" role=\"alert\">\n<h1>{}</h1>\n<p>{}</p>\n</section>",
        esc(title),
        esc(detail)
    );
    page(status, title, &body, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_neutralises_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn json_script_cannot_be_closed_by_a_value() {
        let s = json_script(
            "cfg",
            &serde_json::json!({"x": "</script><script>alert(1)"}),
        );
        assert_eq!(s.matches("</script>").count(), 1, "{s}");
        assert!(s.contains("\\u003c/script>"));
    }
}
