//! The import of small specs written for each rule; the real specs (GitHub,
//! the Petstores, Swagger 2.0) are imported in `tests/tests/openapi.rs`.

use serde_json::json;

use super::*;

fn import_json(spec: serde_json::Value, options: &Options) -> Imported {
    import(Documents::from_value(spec, None), options).unwrap()
}

fn tool(imported: &Imported, name: &str) -> serde_json::Value {
    let t = imported
        .tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| {
            panic!(
                "no tool {name} in {:?}",
                imported.tools.iter().map(|t| &t.name).collect::<Vec<_>>()
            )
        });
    serde_json::to_value(&t.decl).unwrap()
}

fn pets() -> serde_json::Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Pets", "version": "1.0"},
        "servers": [{"url": "https://{region}.pets.example/v1", "variables": {"region": {"default": "eu"}}}],
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}},
            "parameters": {"petId": {"name": "petId", "in": "path", "required": true, "schema": {"type": "integer"}}},
            "schemas": {"Pet": {"type": "object", "required": ["name"], "properties": {
                "id": {"type": "integer", "readOnly": true},
                "name": {"type": "string"},
                "tag": {"type": "string", "nullable": true}
            }}}
        },
        "security": [{"key": []}],
        "paths": {
            "/pets": {
                "get": {"operationId": "listPets", "summary": "List pets", "security": [],
                        "parameters": [
                            {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                            {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                            {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                            {"name": "session", "in": "cookie", "schema": {"type": "string"}},
                            {"name": "Accept", "in": "header", "schema": {"type": "string"}}
                        ]},
                "post": {"operationId": "createPet", "description": "Create a pet.\n\nMore words.",
                         "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}
            },
            "/pets/{petId}": {
                "parameters": [{"$ref": "#/components/parameters/petId"}],
                "put": {"operationId": "replacePet",
                        "parameters": [{"name": "name", "in": "query", "schema": {"type": "string"}}],
                        "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}},
                "delete": {"deprecated": true},
                "head": {}
            },
            "/pets/{petId}/photo": {
                "post": {"operationId": "uploadPhoto", "requestBody": {"required": true, "content": {"multipart/form-data": {"schema": {"type": "object"}}}}}
            }
        }
    })
}

#[test]
fn a_small_spec_imports_as_reviewable_yaml() {
    let imported = import_json(
        pets(),
        &Options {
            prefix: "pets_".into(),
            ..Options::default()
        },
    );
    insta::assert_snapshot!(to_yaml(&imported, "pets.yaml").unwrap());
}

#[test]
fn parameters_go_where_the_spec_says() {
    let imported = import_json(pets(), &Options::default());
    let list = tool(&imported, "listPets");
    assert_eq!(list["http"]["url"], "https://eu.pets.example/v1/pets");
    assert_eq!(list["http"]["query"]["limit"], "{{ args.limit }}");
    assert!(
        list["http"]["query"]["tags"]
            .as_str()
            .unwrap()
            .contains("join(',')")
    );
    assert_eq!(list["http"]["headers"]["X-Trace"], "{{ args.X_Trace }}");
    assert!(
        list["http"]["headers"]["Cookie"]
            .as_str()
            .unwrap()
            .contains("session={{ args.session }}")
    );
    assert!(list["parameters"]["properties"].get("Accept").is_none());
    // `security: []` on the operation: no key sent.
    assert!(list["http"]["headers"].get("X-Api-Key").is_none());

    let create = tool(&imported, "createPet");
    assert_eq!(create["http"]["headers"]["X-Api-Key"], "{{ env.PETS_KEY }}");
    assert_eq!(
        create["http"]["body"]["json"],
        json!({"name": "{{ args.name }}", "tag": "{{ args.tag }}"})
    );
    assert_eq!(create["parameters"]["required"], json!(["name"]));
    assert!(
        create["parameters"]["properties"].get("id").is_none(),
        "readOnly left out"
    );
    assert_eq!(create["description"], "Create a pet.");

    // `name` is a query parameter and a body property: the body is one argument.
    let replace = tool(&imported, "replacePet");
    assert_eq!(
        replace["http"]["url"],
        "https://eu.pets.example/v1/pets/{{ args.petId }}"
    );
    assert_eq!(replace["http"]["body"]["json"], "{{ args.body }}");
    assert_eq!(replace["parameters"]["required"], json!(["petId"]));
    assert_eq!(
        replace["parameters"]["properties"]["body"]["required"],
        json!(["name"])
    );

    let delete = tool(&imported, "delete_pets_petId");
    assert!(
        delete["description"]
            .as_str()
            .unwrap()
            .starts_with("Deprecated.")
    );
    assert_eq!(
        imported.env,
        vec![(
            "PETS_KEY".to_string(),
            "the API key `X-Api-Key`".to_string()
        )]
    );
    assert_eq!(imported.operations, 6);
    assert_eq!(imported.skipped.len(), 2, "{:?}", imported.skipped);
    assert!(
        imported
            .skipped
            .iter()
            .any(|s| s.contains("multipart/form-data"))
    );
}

#[test]
fn include_exclude_prefix_server_and_auth_env() {
    let options = Options {
        include: vec!["*Pet*".into()],
        exclude: vec!["replace*".into()],
        prefix: "p_".into(),
        server: Some("http://127.0.0.1:9/".into()),
        auth_env: Some("PETS_TOKEN".into()),
    };
    let imported = import_json(pets(), &options);
    let names: Vec<&str> = imported.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["p_listPets", "p_createPet"]);
    let create = tool(&imported, "p_createPet");
    assert_eq!(create["http"]["url"], "http://127.0.0.1:9/pets");
    assert_eq!(
        create["http"]["headers"]["X-Api-Key"],
        "{{ env.PETS_TOKEN }}"
    );
}

#[test]
fn without_schemes_auth_env_is_a_bearer_token() {
    let spec = json!({"openapi": "3.1.0", "info": {"title": "T", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/me": {"get": {"operationId": "me"}}}});
    let imported = import_json(
        spec,
        &Options {
            auth_env: Some("TOKEN".into()),
            ..Options::default()
        },
    );
    assert_eq!(
        tool(&imported, "me")["http"]["headers"]["Authorization"],
        "Bearer {{ env.TOKEN }}"
    );
}

#[test]
fn swagger_2_parameters_body_and_form() {
    let spec = json!({
        "swagger": "2.0", "info": {"title": "Old", "version": "1"},
        "host": "old.example", "basePath": "/api", "schemes": ["http", "https"],
        "securityDefinitions": {"basic": {"type": "basic"}},
        "definitions": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "x-nullable": true}}}},
        "paths": {
            "/pets": {"post": {"operationId": "addPet", "security": [{"basic": []}],
                "parameters": [{"in": "body", "name": "pet", "required": true, "schema": {"$ref": "#/definitions/Pet"}}]}},
            "/pets/{id}": {"post": {"operationId": "updateForm", "consumes": ["application/x-www-form-urlencoded"],
                "parameters": [{"in": "path", "name": "id", "required": true, "type": "integer"},
                               {"in": "formData", "name": "status", "type": "string", "enum": ["a", "b"]}]},
                "get": {"operationId": "getPet", "parameters": [{"in": "path", "name": "id", "type": "integer", "required": true},
                    {"in": "query", "name": "fields", "type": "array", "items": {"type": "string"}, "collectionFormat": "csv"}]}},
            "/pets/{id}/file": {"post": {"operationId": "upload", "consumes": ["multipart/form-data"],
                "parameters": [{"in": "path", "name": "id", "required": true, "type": "integer"}, {"in": "formData", "name": "f", "type": "file"}]}}
        }
    });
    let imported = import_json(spec, &Options::default());
    let add = tool(&imported, "addPet");
    assert_eq!(add["http"]["url"], "https://old.example/api/pets");
    assert_eq!(
        add["http"]["headers"]["Authorization"],
        "Basic {{ env.OLD_BASIC }}"
    );
    assert_eq!(
        add["parameters"]["properties"]["age"]["type"],
        json!(["integer", "null"])
    );
    let form = tool(&imported, "updateForm");
    assert_eq!(
        form["http"]["body"]["content_type"],
        "application/x-www-form-urlencoded"
    );
    assert!(
        form["http"]["body"]["text"]
            .as_str()
            .unwrap()
            .contains("status={{ args.status }}")
    );
    let get = tool(&imported, "getPet");
    assert_eq!(
        get["parameters"]["properties"]["fields"],
        json!({"type": "array", "items": {"type": "string"}})
    );
    assert!(
        imported.skipped.iter().any(|s| s.contains("file upload")),
        "{:?}",
        imported.skipped
    );
}

#[test]
fn a_relative_server_needs_server_and_bad_inputs_are_errors() {
    let spec = json!({"openapi": "3.0.0", "info": {"title": "T", "version": "1"},
        "servers": [{"url": "/api/v3"}], "paths": {"/x": {"get": {}}}});
    let err = import(
        Documents::from_value(spec.clone(), None),
        &Options::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("--server"), "{err}");
    assert!(
        import(
            Documents::from_value(json!({"info": {}}), None),
            &Options::default()
        )
        .is_err()
    );
    let bad_env = Options {
        auth_env: Some("lower".into()),
        ..Options::default()
    };
    assert!(matches!(
        import(Documents::from_value(spec, None), &bad_env),
        Err(ImportError::EnvName(_))
    ));
}

#[test]
fn the_same_spec_gives_the_same_bytes() {
    let a = to_yaml(&import_json(pets(), &Options::default()), "pets.yaml").unwrap();
    let b = to_yaml(&import_json(pets(), &Options::default()), "pets.yaml").unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_spec_cannot_smuggle_template_syntax_into_a_request() {
    // A server URL or a cookie name reading `env` would send another API's
    // credential to this one.
    let spec = |server: &str, cookie: &str| {
        json!({"openapi": "3.0.0", "info": {"title": "T", "version": "1"},
               "servers": [{"url": server}],
               "paths": {"/a/{x}": {"get": {"operationId": "a", "parameters": [
                   {"name": "x", "in": "path", "required": true, "schema": {"type": "string"}},
                   {"name": cookie, "in": "cookie", "schema": {"type": "string"}}]}}}})
    };
    let err = import(
        Documents::from_value(spec("https://x.example/{{ env.GITHUB_TOKEN }}", "c"), None),
        &Options::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::Server(_)), "{err}");
    let imported = import_json(
        spec("https://x.example", "c={{ env.GITHUB_TOKEN }}"),
        &Options::default(),
    );
    assert!(imported.tools.is_empty());
    assert!(
        imported.skipped[0].contains("not a valid cookie name"),
        "{:?}",
        imported.skipped
    );
    // Template syntax in a path is only ever a parameter name.
    let path = json!({"openapi": "3.0.0", "info": {"title": "T", "version": "1"},
        "servers": [{"url": "https://x.example"}],
        "paths": {"/b{{ env.GITHUB_TOKEN }}": {"get": {"operationId": "b"}}}});
    let b = tool(&import_json(path, &Options::default()), "b");
    assert!(!b["http"]["url"].as_str().unwrap().contains("env."), "{b}");
}
