//! Field ownership (`metadata.managedFields`), as the real API server tracks it for
//! server-side apply.
//!
//! Every write records which manager set which fields. A field set is a tree of path elements
//! written the way the real server writes `fieldsV1`: `f:name` for a field, `k:{"name":"x"}` for
//! an item of a list keyed by its merge keys, `v:"x"` for an item of a set, and `.` for a node
//! that is owned itself as well as holding owned children. Non-apply writes (create, update,
//! merge/JSON/strategic patches) give their manager the fields they add or change and take them
//! from everyone else. Apply makes the applied configuration's fields the manager's `Apply` set,
//! removes the fields that manager applied before and no longer applies (unless another
//! manager owns them too), and refuses with a 409 to change a value another manager owns,
//! unless forced.
//!
//! Which lists are keyed, which are sets and which are atomic comes from the kind's schema:
//! `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` / `x-kubernetes-map-type` in a
//! CRD's schema, and for built-in kinds the same merge keys the strategic merge uses
//! ([`crate::patch::merge_key`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// The annotation client-side `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The longest field manager name the real server accepts.
pub const MAX_MANAGER_LEN: usize = 128;

/// A set of field paths, as a tree keyed by encoded path elements (`f:spec`, `k:{...}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// The path leading here is in the set itself.
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub fn insert(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.member = true,
            Some((first, rest)) => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let rest = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(k.clone(), rest);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let both = v.intersection(o);
                if !both.is_empty() {
                    out.children.insert(k.clone(), both);
                }
            }
        }
        out
    }

    /// Every path in the set, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The set without the subtree under `element`.
    fn without_child(mut self, element: &str) -> FieldSet {
        self.children.remove(element);
        self
    }

    /// `fieldsV1`: each element maps to its children; `.` marks a node owned itself.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, v) in &self.children {
            map.insert(k.clone(), v.to_fields_v1());
        }
        Value::Object(map)
    }

    /// Reads `fieldsV1`; None when it is not a tree of objects.
    pub fn from_fields_v1(v: &Value) -> Option<FieldSet> {
        let map = v.as_object()?;
        let mut out = FieldSet::default();
        for (k, child) in map {
            if k == "." {
                continue;
            }
            let mut sub = FieldSet::from_fields_v1(child)?;
            let child_map = child.as_object()?;
            if child_map.is_empty() || child_map.contains_key(".") {
                sub.member = true;
            }
            out.children.insert(k.clone(), sub);
        }
        Some(out)
    }
}

/// `.spec.containers[name="a"].image`, as the real server names a path in conflicts.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(name) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = element.strip_prefix("k:") {
            let fields: Vec<String> = serde_json::from_str::<Map<String, Value>>(key)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            out.push_str(&format!("[{}]", fields.join(",")));
        } else if let Some(v) = element.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = element.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

fn field(name: &str) -> String {
    format!("f:{name}")
}

/// `k:{"name":"x"}` with the key fields in name order, as the real server writes them.
fn key_element(fields: &[(&str, &Value)]) -> String {
    let mut sorted: Vec<&(&str, &Value)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let inner: Vec<String> = sorted
        .iter()
        .map(|(k, v)| format!("{}:{}", Value::String((*k).to_string()), v))
        .collect();
    format!("k:{{{}}}", inner.join(","))
}

/// Key fields the real schemas default, so an item that leaves them out has the same key.
fn default_key_value(key: &str) -> Option<Value> {
    (key == "protocol").then(|| json!("TCP"))
}

/// How the items of a list are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind<'a> {
    /// The list is one value.
    Atomic,
    /// Items are scalars, each owned on its own (`v:`).
    Set,
    /// Items are objects told apart by these fields (`k:`).
    Map(Keys<'a>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys<'a> {
    One(&'static str),
    /// Container ports (containerPort, protocol) or Service ports (port, protocol).
    Ports,
    /// A CRD's `x-kubernetes-list-map-keys`.
    Crd(&'a Value),
}

/// How a built-in kind's list is told apart, from the field it is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BuiltinList {
    Atomic,
    Set,
    Key(&'static str),
    /// Container ports or Service ports, keyed with their protocol.
    Ports,
}

impl BuiltinList {
    /// The list under field `name` of a built-in struct (`in_meta`: an ObjectMeta).
    fn of(name: &str, in_meta: bool) -> Self {
        match name {
            "finalizers" if in_meta => Self::Set,
            "ports" => Self::Ports,
            _ => crate::patch::merge_key(name, &[]).map_or(Self::Atomic, Self::Key),
        }
    }
}

/// The schema of one node of an object: a CRD schema node, a built-in kind's schema node
/// (from its k8s-openapi type) or nothing known (maps owned per key, lists whole).
#[derive(Debug, Clone, Copy)]
pub struct Schema<'a> {
    node: Option<&'a Value>,
    meta: &'a Value,
    builtin: bool,
    list: BuiltinList,
    atomic_map: bool,
    root: bool,
    in_meta: bool,
}

/// Owns what a [`Schema`] borrows for one kind.
pub struct KindSchema {
    kind: Option<Arc<Value>>,
    crd: Option<Arc<crate::schema::Schema>>,
    meta: Arc<Value>,
}

impl KindSchema {
    pub fn new(
        kind: Option<Arc<Value>>,
        crd: Option<Arc<crate::schema::Schema>>,
        meta: Arc<Value>,
    ) -> Self {
        Self { kind, crd, meta }
    }

    pub fn root(&self) -> Schema<'_> {
        let (node, builtin) = match (&self.crd, &self.kind) {
            (Some(c), _) => (Some(c.schema()), false),
            (None, Some(k)) => (Some(&**k), true),
            (None, None) => (None, false),
        };
        Schema {
            node,
            meta: &self.meta,
            builtin,
            list: BuiltinList::Atomic,
            atomic_map: false,
            root: true,
            in_meta: false,
        }
    }
}

impl<'a> Schema<'a> {
    fn deduced(&self) -> Schema<'a> {
        Schema {
            node: None,
            builtin: false,
            list: BuiltinList::Atomic,
            atomic_map: false,
            root: false,
            in_meta: false,
            ..*self
        }
    }

    /// The schema of field `name`, and whether it is a declared field (not a map entry).
    fn child(&self, name: &str) -> (Schema<'a>, bool) {
        let declared = self
            .node
            .and_then(|n| n.get("properties"))
            .and_then(|p| p.get(name));
        // Every object's `metadata`, and a built-in template's, is an ObjectMeta.
        let is_meta = name == "metadata" && (self.root || (self.builtin && declared.is_some()));
        let (node, declared, builtin) = if is_meta {
            (Some(self.meta), true, true)
        } else if let Some(p) = declared {
            (Some(p), true, self.builtin)
        } else if let Some(ap) = self
            .node
            .and_then(|n| n.get("additionalProperties"))
            .filter(|a| a.is_object())
        {
            (Some(ap), false, self.builtin)
        } else {
            return (self.deduced(), false);
        };
        let child = Schema {
            node,
            meta: self.meta,
            builtin,
            list: BuiltinList::of(name, self.in_meta),
            // LabelSelectors, Service selectors and node selectors are atomic upstream.
            atomic_map: builtin && declared && matches!(name, "selector" | "nodeSelector"),
            root: false,
            in_meta: is_meta,
        };
        (child, declared)
    }

    fn items(&self) -> Schema<'a> {
        match self
            .node
            .and_then(|n| n.get("items"))
            .filter(|i| i.is_object())
        {
            Some(items) => Schema {
                node: Some(items),
                list: BuiltinList::Atomic,
                atomic_map: false,
                root: false,
                in_meta: false,
                ..*self
            },
            None => self.deduced(),
        }
    }

    fn list_kind(&self) -> ListKind<'a> {
        if self.builtin {
            return match self.list {
                BuiltinList::Set => ListKind::Set,
                BuiltinList::Ports => ListKind::Map(Keys::Ports),
                BuiltinList::Key(k) => ListKind::Map(Keys::One(k)),
                BuiltinList::Atomic => ListKind::Atomic,
            };
        }
        let Some(node) = self.node else {
            return ListKind::Atomic;
        };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListKind::Set,
            Some("map") => match node.get("x-kubernetes-list-map-keys") {
                Some(keys @ Value::Array(_)) => ListKind::Map(Keys::Crd(keys)),
                _ => ListKind::Atomic,
            },
            _ => ListKind::Atomic,
        }
    }

    fn map_is_atomic(&self) -> bool {
        self.atomic_map
            || self
                .node
                .and_then(|n| n.get("x-kubernetes-map-type"))
                .and_then(Value::as_str)
                == Some("atomic")
    }

    /// Whether a node of this schema added or removed as a whole is owned itself (`.`). The
    /// real server writes it for maps and list items, and for every object of a custom
    /// resource; a built-in kind's structs are there from the start in its Go types.
    fn owned_as_node(&self) -> bool {
        !self.builtin || self.node.is_none_or(|n| n.get("properties").is_none())
    }
}

/// The path element of a list item, or None when it cannot be told apart (no key).
fn item_element(kind: ListKind<'_>, item: &Value, items: &[&Value]) -> Option<String> {
    match kind {
        ListKind::Atomic => None,
        ListKind::Set => Some(format!("v:{item}")),
        ListKind::Map(keys) => {
            let names: Vec<&str> = match keys {
                Keys::One(k) => vec![k],
                Keys::Ports => {
                    if items.iter().any(|i| i.get("containerPort").is_some()) {
                        vec!["containerPort", "protocol"]
                    } else {
                        vec!["port", "protocol"]
                    }
                }
                Keys::Crd(v) => v
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
            };
            let defaults: Vec<(&str, Value)> = names
                .iter()
                .filter_map(|k| match item.get(*k) {
                    Some(v) => Some((*k, v.clone())),
                    None => default_key_value(k).map(|d| (*k, d)),
                })
                .collect();
            if names.is_empty() || defaults.len() < names.len() {
                return None;
            }
            let fields: Vec<(&str, &Value)> = defaults.iter().map(|(k, v)| (*k, v)).collect();
            Some(key_element(&fields))
        }
    }
}

/// The items of a list by path element (the first of duplicates wins), in order.
fn index_items<'v>(kind: ListKind<'_>, list: &'v [Value]) -> Vec<(String, &'v Value)> {
    let all: Vec<&Value> = list.iter().collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let pe = item_element(kind, item, &all).unwrap_or_else(|| format!("i:{i}"));
        if seen.insert(pe.clone()) {
            out.push((pe, item));
        }
    }
    out
}

/// The fields an applied configuration sets (the real server's ToFieldSet).
pub fn config_set(config: &Value, schema: Schema<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    walk_config(config, schema, &mut Vec::new(), &mut set);
    set
}

fn walk_config(v: &Value, s: Schema<'_>, path: &mut Vec<String>, out: &mut FieldSet) {
    match v {
        Value::Object(map) => {
            if s.map_is_atomic() {
                out.insert(path);
                return;
            }
            for (k, child) in map {
                let (cs, declared) = s.child(k);
                path.push(field(k));
                walk_config(child, cs, path, out);
                if !declared {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(list) => {
            let kind = s.list_kind();
            if kind == ListKind::Atomic {
                out.insert(path);
                return;
            }
            for (pe, item) in index_items(kind, list) {
                path.push(pe);
                walk_config(item, s.items(), path, out);
                out.insert(path);
                path.pop();
            }
        }
        _ => out.insert(path),
    }
}

/// What changed between two versions of an object.
#[derive(Debug, Default)]
struct Diff {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn empty(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

fn compare(
    old: Option<&Value>,
    new: Option<&Value>,
    s: Schema<'_>,
    path: &mut Vec<String>,
    own_node: bool,
    d: &mut Diff,
) {
    let (old, new) = (present(old), present(new));
    if old.is_none() && new.is_none() {
        return;
    }
    let shape_of = |v: Option<&Value>| match v {
        Some(Value::Object(_)) => 1,
        Some(Value::Array(_)) => 2,
        Some(_) => 3,
        None => 0,
    };
    let (so, sn) = (shape_of(old), shape_of(new));
    let shape = if so == 0 || so == sn {
        sn
    } else if sn == 0 {
        so
    } else {
        3
    };
    let leaf = shape == 3
        || (empty(old) && empty(new))
        || (shape == 1 && s.map_is_atomic())
        || (shape == 2 && s.list_kind() == ListKind::Atomic);
    if leaf {
        match (old, new) {
            (None, Some(_)) => d.added.insert(path),
            (Some(_), None) => d.removed.insert(path),
            (Some(a), Some(b)) if a != b => d.modified.insert(path),
            _ => {}
        }
        return;
    }
    if shape == 1 {
        let no = old.and_then(Value::as_object);
        let nn = new.and_then(Value::as_object);
        let keys: BTreeSet<&String> = no
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(nn.into_iter().flat_map(|m| m.keys()))
            .collect();
        for k in keys {
            let (cs, declared) = s.child(k);
            path.push(field(k));
            compare(
                no.and_then(|m| m.get(k)),
                nn.and_then(|m| m.get(k)),
                cs,
                path,
                !declared || cs.owned_as_node(),
                d,
            );
            path.pop();
        }
    } else {
        let kind = s.list_kind();
        let empty_list = Vec::new();
        let lo = old.and_then(Value::as_array).unwrap_or(&empty_list);
        let ln = new.and_then(Value::as_array).unwrap_or(&empty_list);
        let io = index_items(kind, lo);
        let inew = index_items(kind, ln);
        let mut order: Vec<&String> = io.iter().map(|(k, _)| k).collect();
        for (k, _) in &inew {
            if !order.contains(&k) {
                order.push(k);
            }
        }
        for pe in order {
            let a = io.iter().find(|(k, _)| k == pe).map(|(_, v)| *v);
            let b = inew.iter().find(|(k, _)| k == pe).map(|(_, v)| *v);
            path.push(pe.clone());
            compare(a, b, s.items(), path, true, d);
            path.pop();
        }
    }
    if own_node && !path.is_empty() {
        match (old, new) {
            (None, Some(_)) => d.added.insert(path),
            (Some(_), None) => d.removed.insert(path),
            _ => {}
        }
    }
}

/// Merges an applied configuration into the live object: maps by key, keyed lists by key,
/// sets by value, atomic lists and scalars replaced; a `null` removes the field.
pub fn merge(live: Option<&Value>, config: &Value, s: Schema<'_>) -> Value {
    match (live, config) {
        (Some(Value::Object(l)), Value::Object(c)) if !s.map_is_atomic() => {
            let mut out = l.clone();
            for (k, v) in c {
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                let (cs, _) = s.child(k);
                let merged = merge(l.get(k), v, cs);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) if s.list_kind() != ListKind::Atomic => {
            let kind = s.list_kind();
            let li = index_items(kind, l);
            let ci = index_items(kind, c);
            let in_config = |pe: &String| ci.iter().any(|(k, _)| k == pe);
            let mut out = Vec::new();
            // The configuration's order, with items only the live list has kept after the
            // item they followed.
            let mut li_iter = li.iter().peekable();
            for (pe, item) in &ci {
                while let Some((lpe, litem)) = li_iter.peek() {
                    if in_config(lpe) {
                        break;
                    }
                    out.push((*litem).clone());
                    li_iter.next();
                }
                if li_iter.peek().is_some_and(|(lpe, _)| lpe == pe) {
                    li_iter.next();
                }
                let live_item = li.iter().find(|(k, _)| k == pe).map(|(_, v)| *v);
                out.push(merge(live_item, item, s.items()));
            }
            for (lpe, litem) in li_iter {
                if !in_config(lpe) {
                    out.push((*litem).clone());
                }
            }
            Value::Array(out)
        }
        (_, Value::Object(c)) => {
            // Nothing live to merge with (or an atomic map): the configuration, without its
            // nulls.
            let mut out = Map::new();
            for (k, v) in c {
                if !v.is_null() {
                    let (cs, _) = s.child(k);
                    out.insert(k.clone(), merge(None, v, cs));
                }
            }
            Value::Object(out)
        }
        (_, other) => other.clone(),
    }
}

/// Whether a list item matches a `k:`/`v:` path element.
fn item_matches(element: &str, index: usize, item: &Value) -> bool {
    if let Some(key) = element.strip_prefix("k:") {
        let Ok(fields) = serde_json::from_str::<Map<String, Value>>(key) else {
            return false;
        };
        fields.iter().all(|(k, v)| match item.get(k) {
            Some(x) => x == v,
            None => default_key_value(k).as_ref() == Some(v),
        })
    } else if let Some(v) = element.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| v == *item)
    } else if let Some(i) = element.strip_prefix("i:") {
        i.parse() == Ok(index)
    } else {
        false
    }
}

/// Removes every field and item of `set` from `obj`. A map or list emptied by it goes too.
pub fn remove(obj: &mut Value, set: &FieldSet) {
    for (element, sub) in &set.children {
        match obj {
            Value::Object(map) => {
                let Some(name) = element.strip_prefix("f:") else {
                    continue;
                };
                if sub.member {
                    map.remove(name);
                } else if let Some(child) = map.get_mut(name) {
                    let was_empty = empty(Some(child));
                    remove(child, sub);
                    if !was_empty && empty(Some(child)) {
                        map.remove(name);
                    }
                }
            }
            Value::Array(items) => {
                let Some(pos) = items
                    .iter()
                    .enumerate()
                    .position(|(i, item)| item_matches(element, i, item))
                else {
                    continue;
                };
                if sub.member {
                    items.remove(pos);
                } else {
                    remove(&mut items[pos], sub);
                }
            }
            _ => {}
        }
    }
}

/// Whether a write is an apply or any other kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub set: FieldSet,
}

impl Entry {
    fn same_owner(&self, manager: &str, operation: Operation, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    /// How conflicts name this manager: `"kubectl"`, or `"x" using v1` for updaters.
    fn display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn to_value(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.set.to_fields_v1(),
        });
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }

    fn from_value(v: &Value) -> Option<Entry> {
        let operation = match v.get("operation")?.as_str()? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        let text = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Some(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: text("time"),
            subresource: text("subresource"),
            set: v
                .get("fieldsV1")
                .and_then(FieldSet::from_fields_v1)
                .unwrap_or_default(),
        })
    }
}

/// The entries of an object's `metadata.managedFields` (None when absent or empty).
fn entries_of(obj: &Value) -> Option<Vec<Entry>> {
    let list = obj.pointer("/metadata/managedFields")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    Some(list.iter().filter_map(Entry::from_value).collect())
}

/// Whether a client asked for the managed fields to be cleared: a list of one empty entry,
/// as the real server takes it (an empty list is ignored, so a client that does not know
/// the field cannot clear it by mistake).
pub fn is_reset(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|l| l.len() == 1 && l[0].as_object().is_some_and(Map::is_empty))
}

/// Who writes, and through which subresource.
#[derive(Debug, Clone)]
pub struct Writer {
    pub manager: String,
    /// `status`, `scale`, or empty for the object itself.
    pub subresource: &'static str,
    /// The request's `group/version`, recorded with the entry.
    pub api_version: String,
    pub time: String,
}

/// An apply refused because it would change fields other managers own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Conflicts(pub Vec<Conflict>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// How the owner is named: `"kubectl"`, `"x" using v1`.
    pub manager: String,
    /// `.spec.replicas`
    pub field: String,
}

impl Conflicts {
    /// The real server's message: `Apply failed with 1 conflict: conflict with "x": .a`, or
    /// for several, grouped by manager.
    pub fn message(&self) -> String {
        if let [one] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                one.manager, one.field
            );
        }
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for c in &self.0 {
            by_manager.entry(&c.manager).or_default().push(&c.field);
        }
        let mut lines = Vec::new();
        for (manager, fields) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(fields.iter().map(|f| format!("- {f}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }
}

/// Server-maintained metadata, never owned by anyone; and the part of the object the
/// subresource does not write (status through the main resource, everything else through
/// `/status`).
fn strip(set: FieldSet, subresource: &str, has_status: bool) -> FieldSet {
    let mut set = set.without_child("f:apiVersion").without_child("f:kind");
    if let Some(meta) = set.children.get_mut("f:metadata") {
        meta.member = false;
        for f in [
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "generation",
            "managedFields",
            "resourceVersion",
        ] {
            meta.children.remove(&field(f));
        }
        if meta.is_empty() {
            set.children.remove("f:metadata");
        }
    }
    match subresource {
        "status" => {
            let status = set.children.remove("f:status");
            let mut out = FieldSet::default();
            if let Some(s) = status {
                out.children.insert("f:status".into(), s);
            }
            out
        }
        _ if has_status => set.without_child("f:status"),
        _ => set,
    }
}

/// The fields the last client-side apply set that still have its values: what `kubectl`
/// may take over from `kubectl-client-side-apply` without a conflict.
fn last_applied_set(live: &Value, s: Schema<'_>) -> Option<FieldSet> {
    let text = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    if last.get("apiVersion") != live.get("apiVersion") {
        return None;
    }
    let set = config_set(&last, s);
    let mut d = Diff::default();
    compare(Some(&last), Some(live), s, &mut Vec::new(), false, &mut d);
    Some(
        set.difference(&d.modified)
            .difference(&d.added)
            .difference(&d.removed),
    )
}

/// Sorts entries as the real server lists them: oldest first, then by manager.
fn sorted(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (&a.time, &a.manager, a.operation.as_str()).cmp(&(
            &b.time,
            &b.manager,
            b.operation.as_str(),
        ))
    });
    entries
}

fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_value).collect()),
        );
    }
}

/// Keeps an entry's old time when its fields did not change, so a write that changes
/// nothing leaves the object as it was.
fn keep_times(before: &[Entry], after: &mut [Entry]) {
    for e in after {
        if let Some(b) = before
            .iter()
            .find(|b| b.same_owner(&e.manager, e.operation, &e.subresource))
            && b.set == e.set
            && b.api_version == e.api_version
        {
            e.time = b.time.clone();
        }
    }
}

/// Records a non-apply write of `new` over `old` (None for a create) by `w`: the writer owns
/// what it added or changed, nobody else does, and removed fields are owned by no one.
/// Managed fields the client sent are the starting point when it sent any, else `old`'s.
pub fn record_update(
    s: Schema<'_>,
    has_status: bool,
    old: Option<&Value>,
    new: &mut Value,
    w: &Writer,
) {
    if is_reset(new) {
        write_entries(new, &[]);
        return;
    }
    let before = old.and_then(entries_of).unwrap_or_default();
    let mut entries = entries_of(new).unwrap_or_else(|| before.clone());
    let mut d = Diff::default();
    compare(old, Some(new), s, &mut Vec::new(), false, &mut d);
    let changed = strip(d.added.union(&d.modified), w.subresource, has_status);
    let removed = strip(d.removed, w.subresource, has_status);
    for e in &mut entries {
        e.set = e.set.difference(&changed).difference(&removed);
    }
    match entries
        .iter_mut()
        .find(|e| e.same_owner(&w.manager, Operation::Update, w.subresource))
    {
        Some(e) => {
            e.set = e.set.union(&changed);
            e.api_version = w.api_version.clone();
            e.time = w.time.clone();
        }
        None => entries.push(Entry {
            manager: w.manager.clone(),
            operation: Operation::Update,
            api_version: w.api_version.clone(),
            time: w.time.clone(),
            subresource: w.subresource.to_string(),
            set: changed,
        }),
    }
    keep_times(&before, &mut entries);
    write_entries(new, &sorted(entries));
}

/// The first half of an apply: the live object (None when the apply creates it) merged
/// with `config`, less the fields `w` applied last time, applies no more and no other
/// manager owns; and the set of fields `config` applies.
pub fn apply_merge(
    s: Schema<'_>,
    has_status: bool,
    live: Option<&Value>,
    config: &Value,
    w: &Writer,
) -> (Value, FieldSet) {
    let set = strip(config_set(config, s), w.subresource, has_status);
    let mut merged = merge(live, config, s);
    let entries = live.and_then(entries_of).unwrap_or_default();
    if let Some(last) = entries
        .iter()
        .find(|e| e.same_owner(&w.manager, Operation::Apply, w.subresource))
    {
        // A field, map entry or list item of the object goes when this manager applied it
        // last time and nobody owns it now: neither this configuration nor another manager.
        let owned = entries
            .iter()
            .filter(|e| !e.same_owner(&w.manager, Operation::Apply, w.subresource))
            .fold(set.clone(), |acc, e| acc.union(&e.set));
        let dropped = config_set(&merged, s)
            .intersection(&last.set)
            .difference(&owned);
        remove(&mut merged, &dropped);
    }
    // Keep the live object's managed fields: the second half works from them.
    if let Some(mf) = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .cloned()
        && let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("managedFields".into(), mf);
    }
    (merged, set)
}

/// The second half of an apply, on the object about to be stored: refuses when it changes a
/// field another manager owns with another value (unless `force`, which takes the field
/// from them), then makes `set` the writer's Apply entry. `kubectl` taking over fields it set
/// by client-side apply (the last-applied annotation still matching the live object) is not
/// a conflict, as on the real server.
pub fn record_apply(
    s: Schema<'_>,
    has_status: bool,
    old: Option<&Value>,
    new: &mut Value,
    set: FieldSet,
    force: bool,
    w: &Writer,
) -> Result<(), Conflicts> {
    let before = old.and_then(entries_of).unwrap_or_default();
    let mut entries = before.clone();
    let mut d = Diff::default();
    compare(old, Some(new), s, &mut Vec::new(), false, &mut d);
    let changed = strip(d.added.union(&d.modified), w.subresource, has_status);
    let mine = |e: &Entry| e.same_owner(&w.manager, Operation::Apply, w.subresource);
    let mut conflicts = Vec::new();
    let mut conflict_set = FieldSet::default();
    for e in entries.iter().filter(|e| !mine(e)) {
        let clash = e.set.intersection(&changed);
        for p in clash.paths() {
            conflicts.push(Conflict {
                manager: e.display(),
                field: path_string(&p),
            });
        }
        conflict_set = conflict_set.union(&clash);
    }
    let mut force = force;
    if !conflicts.is_empty() && !force && w.manager == "kubectl" {
        let allowed = old.and_then(|o| last_applied_set(o, s)).unwrap_or_default();
        let rest = conflict_set.difference(&allowed);
        if rest.is_empty() {
            force = true;
        } else {
            let mut remaining = Vec::new();
            for e in entries.iter().filter(|e| !mine(e)) {
                for p in e.set.intersection(&rest).paths() {
                    remaining.push(Conflict {
                        manager: e.display(),
                        field: path_string(&p),
                    });
                }
            }
            conflicts = remaining;
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        e.set = e.set.difference(&changed);
    }
    entries.retain(|e| !mine(e));
    entries.push(Entry {
        manager: w.manager.to_string(),
        operation: Operation::Apply,
        api_version: w.api_version.to_string(),
        time: w.time.clone(),
        subresource: w.subresource.to_string(),
        set,
    });
    keep_times(&before, &mut entries);
    write_entries(new, &sorted(entries));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Arc<Value> {
        Arc::new(json!({"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "name": {"type": "string"}
        }}))
    }

    fn pod_like() -> KindSchema {
        let kind = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "containers": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "image": {"type": "string"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "ports": {"type": "array", "items": {"type": "object", "properties": {
                        "containerPort": {"type": "integer"}, "protocol": {"type": "string"}}}}
                }}}
            }},
            "data": {"type": "object", "additionalProperties": {"type": "string"}}
        }});
        KindSchema::new(Some(Arc::new(kind)), None, meta())
    }

    fn w(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            subresource: "",
            api_version: "v1".into(),
            time: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn config_sets_use_keys_dots_and_atomic_lists() {
        let ks = pod_like();
        let cfg = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"x": "1"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["a"], "ports": [{"containerPort": 80}]}]}});
        let set = strip(config_set(&cfg, ks.root()), "", false);
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:metadata": {"f:finalizers": {"v:\"f\"": {}}, "f:labels": {"f:x": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
        assert_eq!(
            path_string(&[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"c\"}".into(),
                "f:image".into()
            ]),
            ".spec.containers[name=\"c\"].image"
        );
    }

    #[test]
    fn updates_mark_added_maps_and_take_fields_from_others() {
        let ks = pod_like();
        let mut created = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
        record_update(ks.root(), false, None, &mut created, &w("one"));
        assert_eq!(
            created["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}})
        );
        let mut changed = created.clone();
        changed["data"]["k"] = json!("2");
        changed["data"]["j"] = json!("3");
        record_update(ks.root(), false, Some(&created), &mut changed, &w("two"));
        let mf = changed["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 2);
        assert_eq!(mf[0]["manager"], "one");
        assert_eq!(mf[0]["fieldsV1"], json!({"f:data": {}}));
        assert_eq!(mf[1]["fieldsV1"], json!({"f:data": {"f:j": {}, "f:k": {}}}));
    }

    #[test]
    fn apply_removes_what_it_no_longer_applies_and_conflicts_on_others() {
        let ks = pod_like();
        let s = ks.root();
        let cfg1 = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {"replicas": 1}});
        let (mut o1, set) = apply_merge(s, false, None, &cfg1, &w("a"));
        record_apply(s, false, None, &mut o1, set, false, &w("a")).unwrap();
        let cfg2 =
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1}});
        let (mut o2, set) = apply_merge(s, false, Some(&o1), &cfg2, &w("a"));
        record_apply(s, false, Some(&o1), &mut o2, set, false, &w("a")).unwrap();
        assert_eq!(o2["metadata"]["labels"], json!({"x": "1"}));
        // Another manager: same value shares, another value conflicts.
        let cfg3 = json!({"spec": {"replicas": 1}});
        let (mut o3, set) = apply_merge(s, false, Some(&o2), &cfg3, &w("b"));
        record_apply(s, false, Some(&o2), &mut o3, set, false, &w("b")).unwrap();
        assert_eq!(o3["metadata"]["managedFields"].as_array().unwrap().len(), 2);
        let cfg4 = json!({"spec": {"replicas": 5}});
        let (mut o4, set) = apply_merge(s, false, Some(&o3), &cfg4, &w("b"));
        let err =
            record_apply(s, false, Some(&o3), &mut o4, set.clone(), false, &w("b")).unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
        );
        record_apply(s, false, Some(&o3), &mut o4, set, true, &w("b")).unwrap();
        assert_eq!(
            o4["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:x": {}}}})
        );
    }

    #[test]
    fn crd_sets_and_atomic_maps() {
        let crd = crate::schema::Schema::parse(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "sel": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "additionalProperties": {"type": "object",
                    "properties": {"x": {"type": "integer"}}}}}}}}))
        .unwrap();
        let ks = KindSchema::new(None, Some(Arc::new(crd)), meta());
        let s = ks.root();
        let cfg =
            json!({"spec": {"tags": ["a", "b"], "sel": {"k": "v"}, "free": {"one": {"x": 1}}}});
        assert_eq!(
            config_set(&cfg, s).to_fields_v1(),
            json!({"f:spec": {"f:free": {"f:one": {".": {}, "f:x": {}}}, "f:sel": {},
                "f:tags": {"v:\"a\"": {}, "v:\"b\"": {}}}})
        );
        // Sets merge by value; atomic maps are replaced whole.
        let live = json!({"spec": {"tags": ["b", "c"], "sel": {"old": "1"}}});
        assert_eq!(
            merge(Some(&live), &cfg, s)["spec"],
            json!({"tags": ["a", "b", "c"], "sel": {"k": "v"}, "free": {"one": {"x": 1}}})
        );
    }

    #[test]
    fn keyed_list_merge_keeps_the_order_and_other_items() {
        let ks = pod_like();
        let s = ks.root().child("spec").0.child("containers").0;
        let live = json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]);
        let cfg = json!([{"name": "b", "image": "3"}, {"name": "c", "image": "4"}]);
        assert_eq!(
            merge(Some(&live), &cfg, s),
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "3"}, {"name": "c", "image": "4"}])
        );
    }
}
