//! `/openapi/v2` in the protobuf encoding kubectl asks for
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`: gnostic's `openapi.v2`
//! messages), made from the Swagger 2.0 JSON document `openapi::swagger` builds. Only the
//! parts of the format the document uses are declared here; field numbers are gnostic's.

use prost::Message;
use serde_json::Value;

/// What kubectl sends in `Accept` for the document.
pub const PROTOBUF_MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The Content-Type the real server answers with.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// The value as YAML, which is how gnostic carries values without a schema.
    #[prost(string, tag = "2")]
    pub yaml: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

pub mod additional_properties_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(Box<super::Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    /// ParametersItem.parameter (oneof field 1).
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(message, optional, tag = "1")]
    pub body_parameter: Option<BodyParameter>,
    #[prost(message, optional, tag = "2")]
    pub non_body_parameter: Option<NonBodyParameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    /// NonBodyParameter.query_parameter_sub_schema (oneof field 3).
    #[prost(message, optional, tag = "3")]
    pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(bool, tag = "5")]
    pub allow_empty_value: bool,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    /// ResponseValue.response (oneof field 1).
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    /// SchemaItem.schema (oneof field 1).
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn any(v: &Value) -> Any {
    Any {
        yaml: serde_yaml_ng::to_string(v).unwrap_or_default(),
    }
}

fn named_schemas(map: Option<&Value>) -> Vec<NamedSchema> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(name, s)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema(s)),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn extensions(v: &Value) -> Vec<NamedAny> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("x-"))
                .map(|(k, v)| NamedAny {
                    name: k.clone(),
                    value: Some(any(v)),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One Swagger 2.0 schema (JSON) as its protobuf message.
fn schema(v: &Value) -> Schema {
    let f64_of = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or_default();
    let i64_of = |k: &str| v.get(k).and_then(Value::as_i64).unwrap_or_default();
    let bool_of = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or_default();
    Schema {
        r#ref: text(v, "$ref"),
        format: text(v, "format"),
        title: text(v, "title"),
        description: text(v, "description"),
        default: v.get("default").map(any),
        multiple_of: f64_of("multipleOf"),
        maximum: f64_of("maximum"),
        exclusive_maximum: bool_of("exclusiveMaximum"),
        minimum: f64_of("minimum"),
        exclusive_minimum: bool_of("exclusiveMinimum"),
        max_length: i64_of("maxLength"),
        min_length: i64_of("minLength"),
        pattern: text(v, "pattern"),
        max_items: i64_of("maxItems"),
        min_items: i64_of("minItems"),
        unique_items: bool_of("uniqueItems"),
        max_properties: i64_of("maxProperties"),
        min_properties: i64_of("minProperties"),
        required: v
            .get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        r#enum: v
            .get("enum")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(any).collect())
            .unwrap_or_default(),
        additional_properties: match v.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Box::new(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Boolean(*b)),
            })),
            Some(s @ Value::Object(_)) => Some(Box::new(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Schema(Box::new(schema(
                    s,
                )))),
            })),
            _ => None,
        },
        r#type: v.get("type").and_then(Value::as_str).map(|t| TypeItem {
            value: vec![t.to_string()],
        }),
        items: match v.get("items") {
            Some(Value::Array(list)) => Some(ItemsItem {
                schema: list.iter().map(schema).collect(),
            }),
            Some(s @ Value::Object(_)) => Some(ItemsItem {
                schema: vec![schema(s)],
            }),
            _ => None,
        },
        all_of: v
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema).collect())
            .unwrap_or_default(),
        properties: v.get("properties").map(|p| Properties {
            additional_properties: named_schemas(Some(p)),
        }),
        read_only: bool_of("readOnly"),
        example: v.get("example").map(any),
        vendor_extension: extensions(v),
    }
}

fn operation(v: &Value) -> Operation {
    let parameters = v
        .get("parameters")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let parameter = if p.get("in").and_then(Value::as_str) == Some("body") {
                        Parameter {
                            body_parameter: Some(BodyParameter {
                                description: text(p, "description"),
                                name: text(p, "name"),
                                r#in: "body".into(),
                                required: p.get("required").and_then(Value::as_bool) == Some(true),
                                schema: p.get("schema").map(schema),
                            }),
                            non_body_parameter: None,
                        }
                    } else {
                        Parameter {
                            body_parameter: None,
                            non_body_parameter: Some(NonBodyParameter {
                                query_parameter_sub_schema: Some(QueryParameterSubSchema {
                                    required: false,
                                    r#in: text(p, "in"),
                                    description: text(p, "description"),
                                    name: text(p, "name"),
                                    allow_empty_value: false,
                                    r#type: text(p, "type"),
                                    unique_items: p.get("uniqueItems").and_then(Value::as_bool)
                                        == Some(true),
                                }),
                            }),
                        }
                    };
                    ParametersItem {
                        parameter: Some(parameter),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let responses = v
        .get("responses")
        .and_then(Value::as_object)
        .map(|rs| Responses {
            response_code: rs
                .iter()
                .map(|(code, r)| NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue {
                        response: Some(Response {
                            description: text(r, "description"),
                            schema: r.get("schema").map(|s| SchemaItem {
                                schema: Some(schema(s)),
                            }),
                        }),
                    }),
                })
                .collect(),
        });
    let strings = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Operation {
        description: text(v, "description"),
        operation_id: text(v, "operationId"),
        produces: strings("produces"),
        consumes: strings("consumes"),
        parameters,
        responses,
        vendor_extension: extensions(v),
    }
}

/// The Swagger 2.0 document (JSON) in gnostic's protobuf encoding.
pub fn encode(doc: &Value) -> Vec<u8> {
    let paths = doc.get("paths").and_then(Value::as_object).map(|ps| Paths {
        path: ps
            .iter()
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(PathItem {
                    get: item.get("get").map(operation),
                    put: item.get("put").map(operation),
                    post: item.get("post").map(operation),
                    delete: item.get("delete").map(operation),
                    patch: item.get("patch").map(operation),
                }),
            })
            .collect(),
    });
    Document {
        swagger: text(doc, "swagger"),
        info: doc.get("info").map(|i| Info {
            title: text(i, "title"),
            version: text(i, "version"),
        }),
        paths,
        definitions: Some(Definitions {
            additional_properties: named_schemas(doc.get("definitions")),
        }),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_round_trip_through_the_protobuf_messages() {
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.34.0"},
            "paths": {"/api/v1/namespaces/{namespace}/configmaps": {"post": {"operationId": "createConfigMap",
                "parameters": [{"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.ConfigMap"}},
                    {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true}],
                "responses": {"201": {"description": "Created"}}}}},
            "definitions": {"io.k8s.api.core.v1.ConfigMap": {"type": "object", "description": "ConfigMap holds configuration data.",
                "required": ["data"],
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tags": {"type": "array", "items": {"type": "string"}}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]}}});
        let bytes = encode(&doc);
        let back = Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.swagger, "2.0");
        let defs = back.definitions.unwrap().additional_properties;
        assert_eq!(defs[0].name, "io.k8s.api.core.v1.ConfigMap");
        let cm = defs[0].value.as_ref().unwrap();
        assert_eq!(cm.r#type.as_ref().unwrap().value, ["object"]);
        assert_eq!(cm.required, ["data"]);
        let props = &cm.properties.as_ref().unwrap().additional_properties;
        assert_eq!(props[0].name, "data");
        assert!(matches!(
            props[0]
                .value
                .as_ref()
                .unwrap()
                .additional_properties
                .as_deref(),
            Some(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Schema(_))
            })
        ));
        assert_eq!(
            cm.vendor_extension[0].name,
            "x-kubernetes-group-version-kind"
        );
        let gvk: Value =
            serde_yaml_ng::from_str(&cm.vendor_extension[0].value.as_ref().unwrap().yaml).unwrap();
        assert_eq!(
            gvk,
            json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
        );
        let post = back.paths.unwrap().path[0]
            .value
            .clone()
            .unwrap()
            .post
            .unwrap();
        assert_eq!(post.operation_id, "createConfigMap");
        assert_eq!(post.parameters.len(), 2);
    }
}
