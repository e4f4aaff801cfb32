//! Tables, JSON and YAML on stdout.

use std::io::Write;

use serde::Serialize;

use crate::{
    args::{DryrunFormat, OutFormat},
    error::{Error, Result},
};

/// A text table: every cell padded to its column's width and the columns separated by two
/// spaces (as kubectl does; a tab after padding misaligned once a name passed a tab stop).
#[derive(Debug, Clone)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if c + 1 < row.len() {
                    let pad = widths[c].saturating_sub(cell.chars().count());
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

pub fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Error::Encode {
            format: "json",
            message: e.to_string(),
        })
}

pub fn to_yaml<T: Serialize>(value: &T) -> Result<String> {
    serde_yaml_ng::to_string(value).map_err(|e| Error::Encode {
        format: "yaml",
        message: e.to_string(),
    })
}

pub fn render<T: Serialize>(value: &T, format: OutFormat) -> Result<String> {
    match format {
        OutFormat::Json => to_json(value),
        OutFormat::Yaml => to_yaml(value),
    }
}

pub fn render_dryrun<T: Serialize>(value: &T, format: DryrunFormat) -> Result<String> {
    match format {
        DryrunFormat::Json => to_json(value),
        DryrunFormat::Yaml => to_yaml(value),
    }
}

/// A kubectl-style `List` of items, for `-o json|yaml` of list commands.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemList<T: Serialize> {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub items: Vec<T>,
}

impl<T: Serialize> ItemList<T> {
    pub fn new(items: Vec<T>) -> Self {
        Self {
            api_version: "v1",
            kind: "List",
            items,
        }
    }
}

/// Writes to stdout; a closed pipe is reported as an error, not a panic.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

pub fn println(text: &str) -> Result<()> {
    print(&format!("{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_separates_with_two_spaces() {
        let mut t = Table::new(&["NAME", "NAMESPACE", "STATUS"]);
        t.row(vec!["a-long-name".into(), "ns".into(), "1/1 READY".into()]);
        t.row(vec!["b".into(), "default".into(), String::new()]);
        assert_eq!(
            t.render(),
            "NAME         NAMESPACE  STATUS\na-long-name  ns         1/1 READY\nb            default\n"
        );
    }
}
