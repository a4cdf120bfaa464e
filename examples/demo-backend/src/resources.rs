//! The resources: `demo://NAME/readme`, `demo://NAME/counter` and the
//! template `demo://NAME/item/{id}`. Pure functions of the hub; the
//! subscription bookkeeping lives in `server` and `hub`.

use rmcp::{
    ErrorData as McpError,
    model::{
        ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
        ResourceContents, ResourceTemplate,
    },
};
use serde_json::json;

use crate::hub::Hub;

const TEXT: &str = "text/plain";

/// What a URI of this server names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target<'a> {
    Readme,
    Counter,
    Item(&'a str),
}

/// `resources/list`: the readme and the counter.
pub fn list(hub: &Hub) -> ListResourcesResult {
    let name = hub.name();
    ListResourcesResult::with_all_items(vec![
        Resource::new(format!("demo://{name}/readme"), "readme")
            .with_description(format!("A greeting from {name}"))
            .with_mime_type(TEXT),
        Resource::new(hub.counter_uri(), "counter")
            .with_description("A counter that the bump tool increments; subscribe to follow it")
            .with_mime_type(TEXT),
    ])
}

/// `resources/templates/list`: the item template.
pub fn templates(hub: &Hub) -> ListResourceTemplatesResult {
    let name = hub.name();
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(format!("demo://{name}/item/{{id}}"), "item")
            .with_description("Any item, by id")
            .with_mime_type(TEXT),
    ])
}

/// `resources/read`; unknown URIs get the resource-not-found error.
pub fn read(hub: &Hub, uri: &str) -> Result<ReadResourceResult, McpError> {
    let text = match resolve(hub, uri) {
        Some(Target::Readme) => format!("Hello from {}", hub.name()),
        Some(Target::Counter) => hub.counter().to_string(),
        Some(Target::Item(id)) => format!("item {id} from {}", hub.name()),
        None => return Err(not_found(uri)),
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type(TEXT),
    ]))
}

/// Checks that `uri` names a resource of this server (for `resources/subscribe`).
pub fn check_exists(hub: &Hub, uri: &str) -> Result<(), McpError> {
    resolve(hub, uri).map(|_| ()).ok_or_else(|| not_found(uri))
}

fn resolve<'a>(hub: &Hub, uri: &'a str) -> Option<Target<'a>> {
    let rest = uri
        .strip_prefix("demo://")?
        .strip_prefix(hub.name())?
        .strip_prefix('/')?;
    match rest {
        "readme" => Some(Target::Readme),
        "counter" => Some(Target::Counter),
        _ => {
            let id = rest.strip_prefix("item/")?;
            (!id.is_empty() && !id.contains('/')).then_some(Target::Item(id))
        }
    }
}

fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found(
        format!("resource not found: {uri}"),
        Some(json!({ "uri": uri })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(result: &ReadResourceResult) -> Option<&str> {
        match result.contents.first()? {
            ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        }
    }

    #[test]
    fn reads_every_resource() {
        let hub = Hub::new("d".into(), Vec::new());
        let readme = read(&hub, "demo://d/readme").expect("readme");
        assert_eq!(text_of(&readme), Some("Hello from d"));
        assert_eq!(
            text_of(&read(&hub, "demo://d/counter").expect("counter")),
            Some("0")
        );
        hub.bump_counter();
        assert_eq!(
            text_of(&read(&hub, "demo://d/counter").expect("counter")),
            Some("1")
        );
        let item = read(&hub, "demo://d/item/42").expect("item");
        assert_eq!(text_of(&item), Some("item 42 from d"));
    }

    #[test]
    fn unknown_uris_are_not_found() {
        let hub = Hub::new("d".into(), Vec::new());
        for uri in [
            "demo://other/readme",
            "demo://d/nope",
            "demo://d/item/",
            "demo://d/item/a/b",
            "x",
        ] {
            let error = read(&hub, uri).expect_err(uri);
            assert_eq!(
                error.code,
                rmcp::model::ErrorCode::RESOURCE_NOT_FOUND,
                "{uri}"
            );
        }
        assert!(check_exists(&hub, "demo://d/counter").is_ok());
        assert!(check_exists(&hub, "demo://dd/counter").is_err());
    }
}
