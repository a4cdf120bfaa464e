//! The `elicitation/create` requests the conformance tools send: their
//! messages and requested schemas, exactly as the suite checks them.

use rmcp::{
    ErrorData as McpError,
    model::{ElicitRequestParams, ElicitationSchema},
};
use serde_json::{Value, json};

use crate::fixtures::typed;

/// `test_elicitation`: a plain form asking for a user name and an e-mail.
pub fn basic_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        },
        "required": ["username", "email"]
    })
}

/// `test_elicitation_sep1034_defaults`: a default for every primitive type.
pub fn defaults_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        },
        "required": []
    })
}

/// `test_elicitation_sep1330_enums`: the five enum shapes of SEP-1330.
pub fn enums_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        },
        "required": []
    })
}

/// A form-mode elicitation request with `message` and `schema`.
pub fn form(message: impl Into<String>, schema: Value) -> Result<ElicitRequestParams, McpError> {
    let requested_schema: ElicitationSchema = typed(schema)?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message.into(),
        requested_schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmcp's typed schema must carry every keyword through unchanged, or the
    /// suite would see something other than what is written above.
    fn round_trips(schema: Value) {
        let typed: ElicitationSchema = match serde_json::from_value(schema.clone()) {
            Ok(typed) => typed,
            Err(error) => panic!("schema does not fit rmcp: {error}"),
        };
        let back = serde_json::to_value(&typed).unwrap_or(Value::Null);
        assert_eq!(back, schema);
    }

    #[test]
    fn basic_schema_round_trips() {
        round_trips(basic_schema());
    }

    #[test]
    fn defaults_schema_round_trips() {
        round_trips(defaults_schema());
    }

    #[test]
    fn enums_schema_round_trips() {
        round_trips(enums_schema());
    }
}
