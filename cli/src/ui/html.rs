//! Server-rendered pages. Lists, status and forms work without JavaScript; `app.js` adds the
//! editor's save with rollout progress, the call form's inline answer, live logs and chart
//! refresh on top of the same markup.

use std::fmt::Write;

use super::view::{Cond, EventRow, FunctionPage, FunctionRow, NewFunction, TriggerSection};

/// Escapes text for HTML element content and quoted attribute values.
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

/// Percent-encodes a path segment (object names are DNS labels, but be safe).
pub fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Functions,
    NewFunction,
    Triggers,
    None,
}

/// The page frame: skip link, navigation, the run's anti-forgery token for scripts, main.
pub fn layout(title: &str, namespace: &str, token: &str, nav: Nav, body: &str) -> String {
    let item = |href: &str, label: &str, this: Nav| {
        let current = if nav == this {
            r#" aria-current="page""#
        } else {
            ""
        };
        format!(r#"<li><a href="{href}"{current}>{label}</a></li>"#)
    };
    format!(
        r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="kubeless-token" content="{token}">
<title>{title} · Kubeless</title>
<link rel="stylesheet" href="/assets/style.css">
<script src="/assets/app.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header>
<p class="brand">Kubeless <span class="ns">namespace <strong>{ns}</strong></span></p>
<nav aria-label="Main"><ul>{f}{n}{t}</ul></nav>
</header>
<main id="main" tabindex="-1">
<h1>{title}</h1>
{body}
</main>
</body>
</html>
"##,
        token = esc(token),
        title = esc(title),
        ns = esc(namespace),
        f = item("/functions", "Functions", Nav::Functions),
        n = item("/functions/new", "New function", Nav::NewFunction),
        t = item("/triggers", "Triggers", Nav::Triggers),
    )
}

/// A message box for an API error (one human sentence, never a dump).
pub fn error_box(message: Option<&str>) -> String {
    match message {
        Some(m) => format!(
            r#"<div class="error" role="alert"><strong>Error:</strong> {}</div>"#,
            esc(m)
        ),
        None => String::new(),
    }
}

fn token_input(token: &str) -> String {
    format!(
        r#"<input type="hidden" name="_token" value="{}">"#,
        esc(token)
    )
}

fn ready_badge(status: &str) -> String {
    let class = match status {
        "True" => "ok",
        "False" => "bad",
        _ => "unknown",
    };
    let word = match status {
        "True" => "Ready",
        "False" => "Not ready",
        _ => "Unknown",
    };
    format!(r#"<span class="badge {class}">{word}</span>"#)
}

/// `5s`, `3m`, `2h`, `4d`, as kubectl prints ages.
pub fn age(secs: Option<i64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 120 => format!("{}s", s.max(0)),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) if s < 172_800 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86_400),
    }
}

pub fn events_table(caption: &str, events: &[EventRow]) -> String {
    if events.is_empty() {
        return format!(
            r#"<section aria-labelledby="events-h"><h2 id="events-h">{}</h2><p>No recent events.</p></section>"#,
            esc(caption)
        );
    }
    let mut rows = String::new();
    for e in events {
        let _ = write!(
            rows,
            r#"<tr><td>{}</td><td>{} {}</td><td class="{}">{}</td><td>{}</td><td>{}</td></tr>"#,
            age(e.age_secs),
            esc(&e.kind),
            esc(&e.name),
            if e.type_ == "Warning" { "warn" } else { "" },
            esc(&e.type_),
            esc(&e.reason),
            esc(&e.note)
        );
    }
    format!(
        r#"<section aria-labelledby="events-h"><h2 id="events-h">{c}</h2><table class="events"><caption class="sr-only">{c}</caption><thead><tr><th scope="col">Age</th><th scope="col">Object</th><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th></tr></thead><tbody>{rows}</tbody></table></section>"#,
        c = esc(caption)
    )
}

fn conditions_table(conds: &[Cond]) -> String {
    if conds.is_empty() {
        return "<p>No status conditions yet: the controller has not seen this object.</p>".into();
    }
    let mut rows = String::new();
    for c in conds {
        let _ = write!(
            rows,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(&c.type_),
            esc(&c.status),
            esc(&c.reason),
            esc(&c.message),
            age(c.age_secs)
        );
    }
    format!(
        r#"<table><caption>Status conditions</caption><thead><tr><th scope="col">Type</th><th scope="col">Status</th><th scope="col">Reason</th><th scope="col">Message</th><th scope="col">Since</th></tr></thead><tbody>{rows}</tbody></table>"#
    )
}

pub fn functions_page(rows: &[FunctionRow], events: &[EventRow]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str(
            r#"<p>No functions in this namespace yet. <a href="/functions/new">Create one from a template</a>.</p>"#,
        );
    } else {
        out.push_str(r#"<table id="functions"><caption>Functions</caption><thead><tr><th scope="col">Name</th><th scope="col">Runtime</th><th scope="col">Ready</th><th scope="col">Reason</th><th scope="col">Pods</th><th scope="col">Age</th></tr></thead><tbody>"#);
        for r in rows {
            let _ = write!(
                out,
                r#"<tr data-name="{n}"><td><a href="/functions/{s}">{n}</a></td><td>{rt}</td><td>{badge}</td><td title="{msg}">{reason}</td><td>{pods}</td><td>{age}</td></tr>"#,
                n = esc(&r.name),
                s = seg(&r.name),
                rt = esc(&r.runtime),
                badge = ready_badge(&r.ready),
                msg = esc(&r.message),
                reason = esc(&r.reason),
                pods = esc(&r.pods),
                age = age(r.age_secs)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(&events_table("Recent events", events));
    out
}

pub fn new_function_page(form: &NewFunction, token: &str, error: Option<&str>) -> String {
    let mut options = String::new();
    for rt in &form.runtimes {
        let sel = if *rt == form.runtime { " selected" } else { "" };
        let _ = write!(
            options,
            r#"<option value="{v}"{sel}>{v}</option>"#,
            v = esc(rt)
        );
    }
    format!(
        r#"{err}
<form id="new-function" method="post" action="/functions">
{tok}
<div class="field"><label for="name">Name</label>
<input id="name" name="name" required pattern="[a-z0-9]([-a-z0-9]*[a-z0-9])?" maxlength="63" value="{name}" aria-describedby="name-help">
<p id="name-help" class="help">Lower-case letters, digits and dashes.</p></div>
<div class="field"><label for="runtime">Runtime</label>
<select id="runtime" name="runtime">{options}</select>
<button type="submit" formmethod="get" formaction="/functions/new" formnovalidate class="secondary" id="use-template">Load this runtime's template</button></div>
<div class="field"><label for="handler">Handler</label>
<input id="handler" name="handler" required value="{handler}" aria-describedby="handler-help">
<p id="handler-help" class="help"><code>file.function</code>: the module and the function the runtime calls.</p></div>
<div class="field"><label for="code">Code</label>
<div class="editor"><pre class="gutter" aria-hidden="true"></pre><textarea id="code" name="code" rows="14" spellcheck="false" required>{code}</textarea></div></div>
<button type="submit" id="create">Create function</button>
</form>
<script type="application/json" id="templates">{templates}</script>"#,
        err = error_box(error),
        tok = token_input(token),
        name = esc(&form.name),
        handler = esc(&form.handler),
        code = esc(&form.code),
        templates = form.templates_json.replace('<', "\\u003c"),
    )
}

pub fn function_page(p: &FunctionPage, token: &str, charts: &str) -> String {
    let n = esc(&p.name);
    let s = seg(&p.name);
    let editor = match &p.code {
        Some(code) => format!(
            r#"<form id="editor" method="post" action="/functions/{s}/code" data-generation="{gen}">
{tok}
<div class="field"><label for="code">Code of {n} <span class="help">({handler}, {rt})</span></label>
<div class="editor"><pre class="gutter" aria-hidden="true"></pre><textarea id="code" name="code" rows="16" spellcheck="false">{code}</textarea></div></div>
<button type="submit" id="save">Save and deploy</button>
<p id="rollout" role="status" aria-live="polite"></p>
</form>"#,
            tok = token_input(token),
            gen = p.generation.unwrap_or(0),
            handler = esc(&p.handler),
            rt = esc(&p.runtime),
            code = esc(code),
        ),
        None => format!(
            "<p>The code of this function is {}: edit it with <code>kubeless function update</code>.</p>",
            esc(&p.content_type)
        ),
    };
    format!(
        r#"<div id="status" data-src="/functions/{s}/status">{status}</div>
<section aria-labelledby="code-h"><h2 id="code-h">Code</h2>{editor}</section>
<section aria-labelledby="call-h"><h2 id="call-h">Call</h2>
<form id="call" method="post" action="/functions/{s}/call">
{tok}
<div class="row">
<div class="field"><label for="call-method">Method</label>
<select id="call-method" name="method"><option>GET</option><option selected>POST</option><option>PUT</option><option>PATCH</option><option>DELETE</option></select></div>
<div class="field grow"><label for="call-headers">Headers</label>
<textarea id="call-headers" name="headers" rows="2" spellcheck="false" aria-describedby="call-headers-help">Content-Type: application/json</textarea>
<p id="call-headers-help" class="help">One <code>Name: value</code> per line.</p></div>
</div>
<div class="field"><label for="call-body">Body</label>
<textarea id="call-body" name="body" rows="3" spellcheck="false">{{"hello": "world"}}</textarea></div>
<button type="submit" id="call-send">Call</button>
</form>
<div id="call-result" aria-live="polite">{answer}</div>
</section>
<section aria-labelledby="logs-h"><h2 id="logs-h">Logs</h2>
<p id="logs-status" role="status">Logs follow live with JavaScript; without it, <a href="/functions/{s}/logs">read the log</a>.</p>
<pre id="logs" tabindex="0" aria-label="Log of {n}" data-src="/api/functions/{s}/logs"></pre>
</section>
<section aria-labelledby="charts-h"><h2 id="charts-h">Calls, errors and latency</h2>
<div id="charts" data-src="/functions/{s}/charts">{charts}</div>
<p class="help">From the runtime's <code>/metrics</code>, scraped every 2 s while this page is open. <a href="/functions/{s}">Reload</a>.</p>
</section>
{events}
<section aria-labelledby="delete-h"><h2 id="delete-h">Delete</h2>
<form method="post" action="/functions/{s}/delete">{tok}<button type="submit" class="danger" id="delete">Delete function {n}</button></form>
</section>"#,
        status = function_status(p),
        tok = token_input(token),
        answer = p.answer.as_deref().unwrap_or(""),
        events = events_table("Events", &p.events),
    )
}

/// The function's summary and status conditions (refreshed live by the page's script).
pub fn function_status(p: &FunctionPage) -> String {
    format!(
        r#"<p class="summary">Runtime <strong>{rt}</strong>, handler <code>{handler}</code>, {badge} <span class="pods">pods {pods}</span></p>
{conds}"#,
        rt = esc(&p.runtime),
        handler = esc(&p.handler),
        badge = ready_badge(&p.ready),
        pods = esc(&p.pods),
        conds = conditions_table(&p.conditions),
    )
}

/// The answer of a call, shown in the page (server side without JavaScript, same markup as the
/// script builds).
pub fn call_answer(status: u16, millis: f64, headers: &[(String, String)], body: &str) -> String {
    let mut h = String::new();
    for (k, v) in headers {
        let _ = writeln!(h, "{}: {}", esc(k), esc(v));
    }
    format!(
        r#"<dl class="answer"><dt>Status</dt><dd id="call-status">{status}</dd><dt>Time</dt><dd id="call-time">{millis:.1} ms</dd></dl>
<details><summary>Response headers</summary><pre id="call-headers-out">{h}</pre></details>
<h3>Response body</h3><pre id="call-answer">{}</pre>"#,
        esc(body)
    )
}

pub fn triggers_page(
    sections: &[TriggerSection],
    functions: &[String],
    events: &[EventRow],
    token: &str,
    error: Option<&str>,
) -> String {
    let mut out = error_box(error);
    let mut fn_options = String::new();
    for f in functions {
        let _ = write!(fn_options, r#"<option>{}</option>"#, esc(f));
    }
    out.push_str(r#"<p>Jump to: "#);
    for s in sections {
        let _ = write!(out, r##"<a href="#{}">{}</a> "##, s.kind, esc(s.title));
    }
    out.push_str("</p>");
    for s in sections {
        let k = s.kind;
        let _ = write!(
            out,
            r#"<section id="{k}" aria-labelledby="{k}-h"><h2 id="{k}-h">{}</h2>"#,
            esc(s.title)
        );
        if let Some(e) = &s.error {
            let _ = write!(out, r#"<p class="notice">{}</p>"#, esc(e));
        } else if s.rows.is_empty() {
            out.push_str("<p>None.</p>");
        } else {
            let _ = write!(
                out,
                r#"<table id="{k}-list"><caption class="sr-only">{}</caption><thead><tr><th scope="col">Name</th><th scope="col">Functions</th><th scope="col">{}</th><th scope="col">Ready</th><th scope="col">Reason</th><th scope="col">Age</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead><tbody>"#,
                esc(s.title),
                esc(s.detail_header)
            );
            for r in &s.rows {
                let _ = write!(
                    out,
                    r#"<tr data-name="{n}"><td>{n}</td><td>{t}</td><td>{d}</td><td>{b}</td><td title="{m}">{reason}</td><td>{a}</td><td><form method="post" action="/triggers/{k}/{sn}/delete">{tok}<button type="submit" class="danger small" aria-label="Delete {title} {n}">Delete</button></form></td></tr>"#,
                    n = esc(&r.name),
                    sn = seg(&r.name),
                    t = esc(&r.target),
                    d = esc(&r.detail),
                    b = ready_badge(&r.ready),
                    m = esc(&r.message),
                    reason = esc(&r.reason),
                    a = age(r.age_secs),
                    tok = token_input(token),
                    title = esc(s.title),
                );
            }
            out.push_str("</tbody></table>");
        }
        let _ = write!(
            out,
            r#"<details><summary>Create a {title}</summary><form method="post" action="/triggers/{k}" class="create-trigger">{tok}<div class="field"><label for="{k}-name">Name</label><input id="{k}-name" name="name" required></div>"#,
            title = esc(s.title),
            tok = token_input(token)
        );
        for f in s.fields {
            let id = format!("{k}-{}", f.name);
            if f.name == "function" {
                let _ = write!(
                    out,
                    r#"<div class="field"><label for="{id}">{}</label><select id="{id}" name="function">{fn_options}</select></div>"#,
                    esc(f.label)
                );
            } else {
                let _ = write!(
                    out,
                    r#"<div class="field"><label for="{id}">{}</label><input id="{id}" name="{}" placeholder="{}"{}></div>"#,
                    esc(f.label),
                    f.name,
                    esc(f.placeholder),
                    if f.required { " required" } else { "" }
                );
            }
        }
        out.push_str(r#"<button type="submit">Create</button></form></details></section>"#);
    }
    out.push_str(&events_table("Recent trigger events", events));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::view::TriggerRow;

    #[test]
    fn escapes_and_segments() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        assert_eq!(age(Some(30)), "30s");
        assert_eq!(age(Some(600)), "10m");
        assert_eq!(age(Some(7300)), "2h");
        assert_eq!(age(None), "-");
    }

    #[test]
    fn function_list_is_plain_html_with_labels() {
        let rows = vec![FunctionRow {
            name: "hello".into(),
            runtime: "python3.11".into(),
            ready: "False".into(),
            reason: "BuildFailed".into(),
            message: "pip <failed>".into(),
            pods: "0/1 NOT READY".into(),
            age_secs: Some(65),
        }];
        let html = functions_page(&rows, &[]);
        assert!(html.contains(r#"<a href="/functions/hello">hello</a>"#));
        assert!(html.contains("Not ready"));
        assert!(html.contains("BuildFailed"));
        assert!(html.contains("pip &lt;failed&gt;"));
        assert!(html.contains(r#"<th scope="col">Runtime</th>"#));
        let page = layout("Functions", "default", "tok", Nav::Functions, &html);
        assert!(page.contains(r#"<a href="/functions" aria-current="page">"#));
        assert!(page.contains(r#"<html lang="en">"#));
        assert!(page.contains("Skip to content"));
    }

    #[test]
    fn every_trigger_form_control_has_a_label() {
        let sections = crate::ui::view::trigger_kinds()
            .iter()
            .map(|k| TriggerSection {
                kind: k.kind,
                title: k.title,
                detail_header: k.detail_header,
                fields: k.fields,
                rows: vec![TriggerRow {
                    name: "t1".into(),
                    target: "hello".into(),
                    detail: "x".into(),
                    ready: "True".into(),
                    reason: String::new(),
                    message: String::new(),
                    age_secs: None,
                }],
                error: None,
            })
            .collect::<Vec<_>>();
        let html = triggers_page(&sections, &["hello".into()], &[], "tok", Some("boom"));
        assert!(html.contains(r#"role="alert""#));
        for id in html
            .split(r#"<input id=""#)
            .skip(1)
            .chain(html.split(r#"<select id=""#).skip(1))
        {
            let id = &id[..id.find('"').unwrap_or(0)];
            assert!(
                html.contains(&format!(r#"<label for="{id}">"#)),
                "no label for {id}"
            );
        }
        assert_eq!(html.matches(r#"action="/triggers/"#).count(), 10);
    }
}
