//! Starter code per runtime for "new function": the handler signature each runtime calls.

/// A starting point for one runtime family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub handler: &'static str,
    pub code: &'static str,
}

const PYTHON: Template = Template {
    handler: "hello.handler",
    code: "def handler(event, context):\n    # event['data'] is the request body (parsed when it is JSON).\n    return 'Hello from Python'\n",
};

const NODEJS: Template = Template {
    handler: "hello.handler",
    code: "module.exports = {\n  // event.data is the request body (parsed when it is JSON).\n  handler: (event, context) => 'Hello from Node.js',\n};\n",
};

const RUBY: Template = Template {
    handler: "hello.handler",
    code: "def handler(event, context)\n  # event[:data] is the request body.\n  'Hello from Ruby'\nend\n",
};

const PHP: Template = Template {
    handler: "hello.handler",
    code: "<?php\n\nfunction handler($event, $context) {\n  // $event['data'] is the request body.\n  return 'Hello from PHP';\n}\n",
};

const GO: Template = Template {
    handler: "hello.Handler",
    code: "package kubeless\n\nimport \"github.com/kubeless/kubeless/pkg/functions\"\n\n// Handler answers every call; event.Data is the request body.\nfunc Handler(event functions.Event, context functions.Context) (string, error) {\n\treturn \"Hello from Go\", nil\n}\n",
};

const JAVA: Template = Template {
    handler: "Hello.handler",
    code: "package io.kubeless;\n\nimport io.kubeless.Context;\nimport io.kubeless.Event;\n\npublic class Hello {\n    public String handler(Event event, Context context) {\n        return \"Hello from Java\";\n    }\n}\n",
};

const OTHER: Template = Template {
    handler: "handler.handler",
    code: "",
};

/// The template of a runtime such as `python3.11` (chosen by its ID, the part before the version).
pub fn for_runtime(runtime: &str) -> Template {
    let id: String = runtime
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    match id.as_str() {
        "python" => PYTHON,
        "nodejs" | "node" => NODEJS,
        "ruby" => RUBY,
        "php" => PHP,
        "go" => GO,
        "java" => JAVA,
        _ => OTHER,
    }
}

/// The file extension of a runtime's source file (used to name the code for its checksum).
pub fn extension(runtime: &str) -> &'static str {
    let id: String = runtime
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    match id.as_str() {
        "python" => "py",
        "nodejs" | "node" => "js",
        "ruby" => "rb",
        "php" => "php",
        "go" => "go",
        "java" => "java",
        _ => "txt",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_by_runtime_id() {
        assert_eq!(for_runtime("python3.11"), PYTHON);
        assert_eq!(for_runtime("nodejs22"), NODEJS);
        assert_eq!(for_runtime("go1.21").handler, "hello.Handler");
        assert_eq!(for_runtime("java17").handler, "Hello.handler");
        assert_eq!(for_runtime("dotnetcore8.0"), OTHER);
        assert_eq!(extension("python3.12"), "py");
        assert_eq!(extension("ruby3.1"), "rb");
        assert!(
            for_runtime("python3.11")
                .code
                .contains("def handler(event, context)")
        );
    }
}
