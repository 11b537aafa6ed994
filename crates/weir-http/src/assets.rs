//! The web UI and the OpenAPI document, built into the binary: nothing is fetched at run time.

pub const INDEX_HTML: &[u8] = include_bytes!("../assets/index.html");
pub const APP_JS: &[u8] = include_bytes!("../assets/app.js");
pub const STYLE_CSS: &[u8] = include_bytes!("../assets/style.css");
pub const FAVICON_SVG: &[u8] = include_bytes!("../assets/favicon.svg");
/// The OpenAPI 3.1 document of the JSON API, with the schemas of its answers.
pub const OPENAPI_JSON: &[u8] = include_bytes!("../assets/openapi.json");
