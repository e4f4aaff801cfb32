//! `kubeless ui` driven in a real headless browser (Debian's chromium through chromedriver)
//! against devcluster running the real function-controller and Python runtime: create a
//! function from a template, call it, edit it and see the new answer, see its logs and a chart
//! of the calls just made, create and delete every trigger kind. Screenshots of each page go to
//! `$KUBELESS_UI_SCREENSHOTS` (default: `<target>/tmp/dashboard-screenshots`).
//!
//! Needs `chromium` and `chromedriver` (`apt-get install chromium chromium-driver`; scripts/lib.sh
//! `ensure_tools` installs them). Builds `kubeless-runtime` and `function-controller` first.
#![cfg(test)]

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use kubeless_testkit::{ServiceProcess, eventually};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The repository's image map with `${BIN_DIR}` pointing at the built `kubeless-runtime`.
fn images_dir(into: &Path, bin_dir: &Path) -> PathBuf {
    let repo_dir = devcluster::repo_images_dir();
    let out = into.join("images.d");
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(&repo_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("${BIN_DIR}", &bin_dir.to_string_lossy())
            .replace("${MAP_DIR}", &repo_dir.to_string_lossy());
        std::fs::write(out.join(path.file_name().unwrap()), text).unwrap();
    }
    out
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(cmd))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (by its own PID) when dropped.
struct Proc(tokio::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

struct Shots {
    dir: PathBuf,
}

impl Shots {
    fn new() -> Self {
        let dir = std::env::var_os("KUBELESS_UI_SCREENSHOTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
            });
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    async fn take(&self, browser: &Browser, name: &str) {
        let png = browser.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        std::fs::write(self.dir.join(format!("{name}.png")), png).unwrap();
    }
}

async fn text_of(b: &Browser, css: &str) -> Option<String> {
    b.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

/// Waits until the page's live log (`#logs`) contains `text`.
async fn live_log_shows(b: &Browser, what: &str, text: &str, timeout: Duration) {
    eventually(what, timeout, || async {
        let logs = text_of(b, "#logs").await?;
        logs.contains(text).then_some(())
    })
    .await;
}

async fn attr_of(b: &Browser, css: &str, attr: &str) -> Option<String> {
    b.find(Locator::Css(css))
        .await
        .ok()?
        .attr(attr)
        .await
        .ok()?
}

/// Clicks Call and waits for this call's answer (the result area is replaced per call).
async fn call_once(b: &Browser) -> (String, String) {
    b.execute(
        "document.getElementById('call-result').replaceChildren()",
        vec![],
    )
    .await
    .unwrap();
    b.find(Locator::Id("call-send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the call's answer", Duration::from_secs(60), || async {
        if let Some(status) = text_of(b, "#call-status").await {
            let body = text_of(b, "#call-answer").await.unwrap_or_default();
            return Some((status, body));
        }
        if let Some(err) = text_of(b, "#call-result .error").await {
            return Some(("error".to_string(), err));
        }
        None
    })
    .await
}

/// Calls until the answer contains `want`; returns how many answers contained it (always 1
/// here) and how many calls were made.
async fn call_until(b: &Browser, want: &str, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let mut calls = 0;
    loop {
        let (status, body) = call_once(b).await;
        calls += 1;
        if status == "200" && body.contains(want) {
            return calls;
        }
        assert!(
            Instant::now() < deadline,
            "no answer containing {want:?} after {timeout:?}; last: {status} {body}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn set_code(b: &Browser, code: &str) {
    let area = b.find(Locator::Id("code")).await.unwrap();
    area.clear().await.unwrap();
    area.send_keys(code).await.unwrap();
    let typed = area.prop("value").await.unwrap().unwrap_or_default();
    assert_eq!(typed, code, "the editor holds what was typed");
}

async fn chart_calls(b: &Browser) -> Option<f64> {
    attr_of(b, "#chart-summary", "data-calls")
        .await?
        .parse()
        .ok()
}

/// The URL `kubeless ui` printed (`BASE/?token=...`) and the token in it.
fn printed_url(line: &str, base: &str) -> (String, String) {
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"));
    let access = url
        .strip_prefix(&format!("{base}/?token="))
        .unwrap_or_else(|| panic!("not {base}/?token=...: {url}"));
    assert!(access.len() >= 32, "a long random token: {url}");
    (url.to_string(), access.to_string())
}

/// Starts `kubeless ui` on a free loopback port; returns it, its base URL and its printed line.
async fn start_ui(kubeconfig: &Path) -> (Proc, String, String) {
    let port = free_port();
    let mut ui = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .args(["--kubeconfig"])
        .arg(kubeconfig)
        .args(["ui", "--port", &port.to_string()])
        .env_remove("KUBECONFIG")
        .env_remove("KUBELESS_NAMESPACE")
        .env_remove("KUBELESS_CONFIG")
        .env_remove("KUBELESS_UI_TOKEN_FILE")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting kubeless ui");
    let mut lines = BufReader::new(ui.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("kubeless ui printed its URL in time")
        .unwrap()
        .unwrap_or_default();
    (Proc(ui), format!("http://127.0.0.1:{port}"), first)
}

/// Any local process can connect to the dashboard's port (on devcluster, any function pod):
/// without the printed token it gets 401 everywhere and can change nothing; the token as a
/// bearer works; a browser session (the cookie the printed URL hands out) still needs the
/// page's anti-forgery token and the dashboard's own origin to write; a rebinding Host is
/// refused whatever the credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_refuses_callers_without_the_token() {
    let dir = tempfile::Builder::new()
        .prefix("ui-auth")
        .tempdir_in("/tmp")
        .unwrap();
    let options = devcluster::Options::for_tests(dir.path().join("s"));
    let cluster = devcluster::DevCluster::start(options).await.unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let fns: Api<kubeless_api::Function> = Api::default_namespaced(client.clone());
    let victim: kubeless_api::Function = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "Function",
        "metadata": {"name": "victim"},
        "spec": {"runtime": "python3.11", "handler": "hello.handler",
                 "function": "def handler(event, context):\n    return 'hi'\n"}
    }))
    .unwrap();
    eventually("the CRDs to be served", Duration::from_secs(20), || async {
        fns.create(&PostParams::default(), &victim)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let (_ui, base, first) = start_ui(cluster.kubeconfig_path()).await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let (_, access) = printed_url(&first, &base);
    // Plain HTTP, no cookie jar, redirects not followed: what a process in a pod would use.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let still_there = || async { fns.get_opt("victim").await.unwrap().is_some() };

    // No credential: 401 on pages, the log stream and writes, with a page saying what to open.
    for path in [
        "/",
        "/functions",
        "/functions/victim",
        "/functions/victim/logs",
        "/api/functions/victim/logs",
        "/functions/new",
        "/triggers",
    ] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 401, "GET {path}");
        assert!(r.headers().get("set-cookie").is_none());
        let body = r.text().await.unwrap();
        assert!(
            body.contains("kubeless ui") && body.contains("?token=") && !body.contains("victim"),
            "GET {path}: {body}"
        );
    }
    for (path, form) in [
        ("/functions/victim/delete", "_token=guess"),
        ("/functions/victim/delete", ""),
        ("/functions/victim/code", "_token=x&code=stolen"),
        (
            "/functions",
            "_token=x&name=evil&runtime=python3.11&handler=a.b&code=x",
        ),
    ] {
        let r = http
            .post(format!("{base}{path}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "POST {path} {form}");
    }
    let r = http
        .post(format!("{base}/api/functions/victim/code"))
        .header("content-type", "application/json")
        .body(r#"{"code": "stolen"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the JSON API");
    assert!(still_there().await, "the Function survives");
    assert!(fns.get_opt("evil").await.unwrap().is_none());

    // A wrong token, in the URL, as a bearer or a made-up cookie: 401, no session.
    for (what, req) in [
        (
            "wrong URL token",
            http.get(format!("{base}/?token=wrong-{access}")),
        ),
        (
            "URL token prefix",
            http.get(format!("{base}/?token={}", &access[..access.len() - 1])),
        ),
        (
            "wrong bearer",
            http.get(format!("{base}/functions"))
                .header("authorization", "Bearer wrong"),
        ),
        (
            "made-up cookie",
            http.get(format!("{base}/functions"))
                .header("cookie", format!("kubeless-ui-{port}={access}")),
        ),
    ] {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{what}");
        assert!(r.headers().get("set-cookie").is_none(), "{what}");
    }

    // The right bearer: pages, the log stream.
    let bearer = format!("Bearer {access}");
    let r = http
        .get(format!("{base}/functions/victim"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("victim"));
    // The docs' command for scripts (docs/dashboard.md), on this run's port.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            r#"curl -sf -H "Authorization: Bearer $TOKEN" {base}/functions"#
        ))
        .env("TOKEN", &access)
        .output()
        .expect("sh and curl");
    assert!(out.status.success(), "curl with the bearer: {out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("victim"));
    let r = http
        .get(format!("{base}/api/functions/victim/logs"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the log stream with the bearer");
    assert_eq!(
        r.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    drop(r);

    // DNS rebinding: a foreign Host is refused, even with the right token.
    let r = http
        .get(format!("{base}/functions"))
        .header("host", format!("rebind.evil.example:{port}"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a foreign Host (DNS rebinding)");

    // The printed URL trades the token for a session cookie and drops it from the address.
    let r = http
        .get(format!("{base}/functions/victim?token={access}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers().get("location").unwrap(), "/functions/victim");
    let set_cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        set_cookie.starts_with(&format!("kubeless-ui-{port}="))
            && set_cookie.contains("HttpOnly")
            && set_cookie.contains("SameSite=Strict")
            && !set_cookie.contains(&access),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let page = http
        .get(format!("{base}/functions/victim"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200, "the session cookie opens the pages");
    let page = page.text().await.unwrap();
    // A session's writes still need the dashboard's origin and the page's anti-forgery token.
    let forged = http
        .post(format!("{base}/functions/victim/delete"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("_token=x")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403, "a cross-site form post is refused");
    let tokenless = http
        .post(format!("{base}/functions/victim/delete"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("_token=guess")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tokenless.status(),
        403,
        "a post without the page's anti-forgery token is refused"
    );
    assert!(still_there().await, "the Function survives the forgeries");
    assert!(!page.contains(&access), "pages never show the access token");

    // With the bearer, a script deletes it.
    let r = http
        .post(format!("{base}/functions/victim/delete"))
        .header("authorization", &bearer)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    eventually(
        "the Function to be deleted",
        Duration::from_secs(30),
        || async { (!still_there().await).then_some(()) },
    )
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_headless_browser() {
    let (Some(chromium), Some(chromedriver)) = (which("chromium"), which("chromedriver")) else {
        panic!(
            "chromium and chromedriver are needed: apt-get install chromium chromium-driver \
             (scripts/lib.sh ensure_tools installs them)"
        );
    };
    kubeless_testkit::workspace_bin("kubeless-runtime");
    let bin = kubeless_testkit::target_dir();
    kubeless_testkit::workspace_bin("function-controller");
    let kubeless = PathBuf::from(env!("CARGO_BIN_EXE_kubeless"));

    // devcluster with the pod runner, the CRDs, the function-controller binary.
    let dir = tempfile::Builder::new()
        .prefix("ui")
        .tempdir_in("/tmp")
        .unwrap();
    let mut options = devcluster::Options::for_tests(dir.path().join("s"));
    options.images_dir = Some(images_dir(dir.path(), &bin));
    let cluster = devcluster::DevCluster::start(options).await.unwrap();
    let client = cluster.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kubeless_api::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let fns: Api<kubeless_api::Function> = Api::default_namespaced(client.clone());
    eventually("the CRDs to be served", Duration::from_secs(20), || async {
        fns.list(&ListParams::default()).await.ok().map(|_| ())
    })
    .await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    // Its log goes to a file, shown if a step that waits on it times out.
    let mut controller = ServiceProcess::start(
        "function-controller",
        dir.path(),
        "function-controller",
        &[
            ("KUBECONFIG", kubeconfig.to_string_lossy().into_owned()),
            ("KUBELESS_ADMIN_ADDR", "127.0.0.1:0".into()),
            ("KUBELESS_LISTEN_ON_POD_IP", "true".into()),
        ],
    );

    // kubeless ui on a free loopback port; it prints its URL once listening.
    let port = free_port();
    let admin_port = free_port();
    let mut ui = tokio::process::Command::new(&kubeless)
        .args(["--kubeconfig"])
        .arg(&kubeconfig)
        .args(["ui", "--port", &port.to_string()])
        .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
        .env_remove("KUBECONFIG")
        .env_remove("KUBELESS_NAMESPACE")
        .env_remove("KUBELESS_CONFIG")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting kubeless ui");
    let mut lines = BufReader::new(ui.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("kubeless ui printed its URL in time")
        .unwrap()
        .unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    let (login_url, access) = printed_url(&first, &base);
    let _ui = Proc(ui);

    // The probes need no token; every page does.
    let http = reqwest::Client::new();
    for probe in ["healthz", "readyz"] {
        let r = http
            .get(format!("http://127.0.0.1:{admin_port}/{probe}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "the admin port answers /{probe} (the chart's probes)"
        );
    }
    let page = http.get(format!("{base}/functions")).send().await.unwrap();
    assert_eq!(page.status(), 401, "no page without the token");
    // Lists are plain HTML, for a script with the token too.
    let bearer = format!("Bearer {access}");
    let page = http
        .get(format!("{base}/functions"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("No functions in this namespace yet"),
        "{page}"
    );

    // chromedriver + headless chromium, with a fresh profile and no background networking.
    let driver_port = free_port();
    let _driver = Proc(
        tokio::process::Command::new(&chromedriver)
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting chromedriver"),
    );
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1100",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }),
    );
    let webdriver = format!("http://127.0.0.1:{driver_port}");
    let b: Browser = eventually(
        "chromedriver to start a session",
        Duration::from_secs(60),
        || {
            let caps = caps.clone();
            let webdriver = webdriver.clone();
            async move {
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps)
                    .connect(&webdriver)
                    .await
                    .ok()
            }
        },
    )
    .await;
    let shots = Shots::new();

    // 0. Log in as a user does: open the URL the command printed. The token leaves the
    // address bar, and the session cookie it was traded for is out of the page's reach.
    b.goto(&login_url).await.unwrap();
    let url = b.current_url().await.unwrap();
    assert_eq!(url.path(), "/functions", "{url}");
    assert_eq!(
        url.query(),
        None,
        "the token is dropped from the URL: {url}"
    );
    assert_eq!(
        b.execute("return document.cookie", vec![]).await.unwrap(),
        json!(""),
        "the session cookie is HttpOnly"
    );
    assert!(!b.source().await.unwrap().contains(&access));

    // 1. Create a function from the Python template.
    b.goto(&format!("{base}/functions/new")).await.unwrap();
    let runtime = b.find(Locator::Id("runtime")).await.unwrap();
    runtime.select_by_value("python3.11").await.unwrap();
    let code = b
        .find(Locator::Id("code"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(
        code.contains("return 'Hello from Python'"),
        "template: {code}"
    );
    assert_eq!(
        b.find(Locator::Id("handler"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap()
            .as_deref(),
        Some("hello.handler")
    );
    b.find(Locator::Id("name"))
        .await
        .unwrap()
        .send_keys("hello")
        .await
        .unwrap();
    shots.take(&b, "new-function").await;
    b.find(Locator::Id("create"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.current_url().await.unwrap().path() != "/functions/hello" {
        if Instant::now() > deadline {
            let body = text_of(&b, "main").await.unwrap_or_default();
            panic!(
                "no function page after Create: {}\n{body}",
                b.current_url().await.unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let stored = fns.get("hello").await.unwrap();
    assert_eq!(stored.spec.runtime.as_deref(), Some("python3.11"));
    assert_eq!(stored.spec.function_content_type.as_deref(), Some("text"));

    // 2. Call it from the call form and see the answer (the first pod takes a while).
    b.find(Locator::Id("call-body"))
        .await
        .unwrap()
        .clear()
        .await
        .unwrap();
    b.find(Locator::Id("call-body"))
        .await
        .unwrap()
        .send_keys(r#"{"greeting": "hi"}"#)
        .await
        .unwrap();
    call_until(&b, "Hello from Python", Duration::from_secs(180)).await;
    let time = text_of(&b, "#call-time").await.unwrap();
    assert!(time.ends_with(" ms"), "{time}");

    // 3. Edit the code, save, watch the rollout, and get the new answer.
    let v2 = "def handler(event, context):\n    print('dashboard saw', event['data'], flush=True)\n    return 'Hello v2, you sent ' + str(event['data'])\n";
    set_code(&b, v2).await;
    b.find(Locator::Id("save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let state = eventually(
        "the rollout to finish",
        Duration::from_secs(180),
        || async {
            let s = attr_of(&b, "#rollout", "data-state").await?;
            (s != "pending").then_some(s)
        },
    )
    .await;
    let rollout = text_of(&b, "#rollout").await.unwrap_or_default();
    assert_eq!(state, "ready", "rollout: {rollout}");
    assert!(rollout.starts_with("Deployed"), "{rollout}");
    call_until(&b, "Hello v2, you sent", Duration::from_secs(120)).await;
    eprintln!(
        "charts at the v2 answer: {:?} {:?}",
        text_of(&b, "#chart-summary").await,
        text_of(&b, "#charts .notice").await
    );
    let answer = text_of(&b, "#call-answer").await.unwrap();
    assert!(
        answer.contains("hi"),
        "the body reached the function: {answer}"
    );
    let stored = fns.get("hello").await.unwrap();
    assert_eq!(
        stored.spec.function.as_deref(),
        Some(v2),
        "saved through the API"
    );

    // The status block follows the cluster without a reload: Ready, and the old pod gone.
    eventually(
        "the page to show the function Ready with 1/1 pods",
        Duration::from_secs(60),
        || async {
            b.find(Locator::Css("#status .badge.ok")).await.ok()?;
            let summary = text_of(&b, "#status .summary").await?;
            summary.contains("1/1 READY").then_some(())
        },
    )
    .await;

    // 4. Live logs show what the new code printed.
    live_log_shows(
        &b,
        "the function's print in the live log",
        "dashboard saw",
        Duration::from_secs(60),
    )
    .await;

    // 5. The chart counts exactly the calls made now: wait for a steady count, call 3 times.
    let steady = eventually("a steady call count", Duration::from_secs(60), || async {
        let a = chart_calls(&b).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let c = chart_calls(&b).await?;
        (a == c).then_some(c)
    })
    .await;
    eprintln!(
        "chart before the 3 calls: {} (samples: {:?})",
        text_of(&b, "#chart-summary").await.unwrap_or_default(),
        attr_of(&b, "#chart-summary", "data-samples").await
    );
    for _ in 0..3 {
        let (status, body) = call_once(&b).await;
        assert_eq!(status, "200", "{body}");
    }
    let counted = eventually(
        "the chart to count the 3 calls",
        Duration::from_secs(30),
        || async {
            let n = chart_calls(&b).await?;
            (n >= steady + 3.0).then_some(n)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        chart_calls(&b).await,
        Some(counted),
        "no more calls appear than were made"
    );
    assert_eq!(counted, steady + 3.0);
    let p50 = attr_of(&b, "#chart-summary", "data-p50")
        .await
        .unwrap_or_default();
    assert!(
        p50.parse::<f64>().is_ok_and(|v| v > 0.0),
        "p50 shown: {p50:?}"
    );
    let bars = b
        .find_all(Locator::Css("#chart-calls rect.calls"))
        .await
        .unwrap();
    assert!(!bars.is_empty(), "the calls chart has bars");
    b.execute("window.scrollTo(0, 0)", vec![]).await.unwrap();
    shots.take(&b, "function").await;
    b.execute(
        "document.getElementById('charts-h').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    shots.take(&b, "function-logs-charts").await;

    // Numbers: a call through the dashboard (browser -> ui -> API server proxy -> pod) against
    // the same call straight through the API server's service proxy, in this run.
    let token = attr_of(&b, "meta[name=kubeless-token]", "content")
        .await
        .unwrap();
    let proxy = "/api/v1/namespaces/default/services/hello:http-function-port/proxy/";
    let mut direct = Vec::new();
    let mut via_ui = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let req = http::Request::post(proxy)
            .header("content-type", "application/json")
            .body(br#"{"n": 1}"#.to_vec())
            .unwrap();
        let text = client.request_text(req).await.unwrap();
        direct.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(text.contains("Hello v2"), "{text}");
        let t = Instant::now();
        let r = http
            .post(format!("{base}/api/functions/hello/call"))
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(r#"{"method": "POST", "headers": "Content-Type: application/json", "body": "{\"n\": 1}"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body = r.text().await.unwrap();
        via_ui.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(body.contains("Hello v2"), "{body}");
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "MEASURED call latency, median of 20: via the dashboard {:.1} ms, straight through the service proxy (baseline) {:.1} ms",
        median(&mut via_ui),
        median(&mut direct)
    );

    // Without JavaScript: the call form posts to the server, which answers with the page; the
    // log is a plain-text page.
    let page = http
        .post(format!("{base}/functions/hello/call"))
        .header("authorization", &bearer)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("_token={token}&method=POST&headers=&body=nojs"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(r#"<pre id="call-answer">Hello v2, you sent "#) && page.contains("nojs"),
        "{page}"
    );
    let log = http
        .get(format!("{base}/functions/hello/logs"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(log.contains("dashboard saw"), "{log}");

    // 6. The list: ready, runtime, age.
    b.goto(&format!("{base}/functions")).await.unwrap();
    let row = text_of(&b, "#functions tr[data-name=hello]").await.unwrap();
    assert!(row.contains("python3.11") && row.contains("Ready"), "{row}");
    shots.take(&b, "functions").await;

    // 7. Create and delete each trigger kind; an API error is one readable message.
    let forms: [(&str, &[(&str, &str)]); 5] = [
        ("http", &[("path", "/hello")]),
        (
            "cronjob",
            &[("schedule", "*/5 * * * *"), ("payload", r#"{"a": 1}"#)],
        ),
        (
            "kafka",
            &[("topic", "orders"), ("selector", "function=hello")],
        ),
        (
            "nats",
            &[("topic", "orders"), ("selector", "function=hello")],
        ),
        ("kinesis", &[("stream", "orders"), ("region", "us-east-1")]),
    ];
    for (kind, fields) in forms {
        b.goto(&format!("{base}/triggers#{kind}")).await.unwrap();
        let section = b.find(Locator::Id(kind)).await.unwrap();
        section
            .find(Locator::Css("summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        b.find(Locator::Id(&format!("{kind}-name")))
            .await
            .unwrap()
            .send_keys(&format!("{kind}-hello"))
            .await
            .unwrap();
        for (name, value) in fields {
            b.find(Locator::Id(&format!("{kind}-{name}")))
                .await
                .unwrap()
                .send_keys(value)
                .await
                .unwrap();
        }
        section
            .find(Locator::Css("form.create-trigger button[type=submit]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let css = format!("#{kind}-list tr[data-name={kind}-hello]");
        let row = eventually(
            &format!("the new {kind} trigger in the list"),
            Duration::from_secs(30),
            || {
                let css = css.clone();
                let b = &b;
                async move { text_of(b, &css).await }
            },
        )
        .await;
        assert!(row.contains(&format!("{kind}-hello")), "{row}");
    }
    assert_eq!(
        Api::<kubeless_api::HttpTrigger>::default_namespaced(client.clone())
            .get("http-hello")
            .await
            .unwrap()
            .spec
            .function_name,
        "hello"
    );
    b.goto(&format!("{base}/triggers")).await.unwrap();
    shots.take(&b, "triggers").await;
    // The same HTTP trigger again: the API server's refusal, as one sentence.
    let section = b.find(Locator::Id("http")).await.unwrap();
    section
        .find(Locator::Css("summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.find(Locator::Id("http-name"))
        .await
        .unwrap()
        .send_keys("http-hello")
        .await
        .unwrap();
    section
        .find(Locator::Css("form.create-trigger button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let error = eventually("the error message", Duration::from_secs(30), || async {
        text_of(&b, "[role=alert]").await
    })
    .await;
    assert!(error.contains("already exists"), "{error}");
    assert!(
        !error.contains("ErrorResponse") && !error.contains('{'),
        "no debug dump: {error}"
    );
    shots.take(&b, "error").await;
    for kind in ["http", "cronjob", "kafka", "nats", "kinesis"] {
        b.goto(&format!("{base}/triggers#{kind}")).await.unwrap();
        b.find(Locator::Css(&format!(
            "#{kind}-list tr[data-name={kind}-hello] button"
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
        let css = format!("#{kind}-list tr[data-name={kind}-hello]");
        eventually(
            &format!("the {kind} trigger to leave the list"),
            Duration::from_secs(30),
            || {
                let css = css.clone();
                let b = &b;
                async move {
                    b.find(Locator::Id(&format!("{kind}-h"))).await.ok()?;
                    b.find(Locator::Css(&css)).await.is_err().then_some(())
                }
            },
        )
        .await;
    }
    assert!(
        Api::<kubeless_api::KinesisTrigger>::default_namespaced(client.clone())
            .get_opt("kinesis-hello")
            .await
            .unwrap()
            .is_none()
    );

    // 8. Delete the function from its page.
    b.goto(&format!("{base}/functions/hello")).await.unwrap();
    // The page holds still while its live log fills in: a button that moves under the pointer
    // takes a click meant for it somewhere else. (The log area used to grow by up to 12rem as
    // the first lines arrived, just after load, and a click on Delete could miss.) Measured
    // with the log full, then emptied.
    let delete_top = "return document.getElementById('delete').getBoundingClientRect().top \
                      + window.scrollY";
    live_log_shows(
        &b,
        "the log lines on the new page",
        "dashboard saw",
        Duration::from_secs(30),
    )
    .await;
    let full = b.execute(delete_top, vec![]).await.unwrap();
    b.execute("document.getElementById('logs').textContent = ''", vec![])
        .await
        .unwrap();
    let empty = b.execute(delete_top, vec![]).await.unwrap();
    assert_eq!(
        full, empty,
        "the Delete button moves with the log's length (top with the log full, then empty)"
    );
    b.find(Locator::Id("delete"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deleted = tokio::time::timeout(Duration::from_secs(60), async {
        while fns.get_opt("hello").await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        deleted.is_ok(),
        "the function was not deleted within 60 s: {:?}\nthe browser is at {:?}: {:?}\n\
         function-controller (running: {}) log:\n{}",
        fns.get_opt("hello").await.map(|f| f.map(|f| f.metadata)),
        b.current_url().await.map(|u| u.to_string()),
        text_of(&b, "main").await,
        controller.running(),
        controller.log_tail(40)
    );

    b.close().await.unwrap();
    cluster.shutdown().await;
}
