//! What the sink says about itself and its failures (no database needed).

mod common;

use std::collections::BTreeMap;

use common::*;
use weir_jdbc::JdbcSinkFactory;
use weir_runtime::sink::Delivery;
use weir_runtime::{Registry, SinkFactory};

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn spec_leaves_out_the_password_and_reads_back() {
    let sink = JdbcSinkFactory::from_options(
        &options(&[
            ("connector", "jdbc"),
            ("url", "jdbc:postgresql://u:s3cret@db:5432/shop"),
            ("table-name", "public.orders"),
            ("sink.buffer-flush.interval", "500 ms"),
        ]),
        "job",
        "orders",
    )
    .unwrap()
    .with_primary_key(["id"]);
    let spec = sink.spec();
    let shown = format!("{spec} {sink:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert_eq!(
        spec["options"]["url"],
        "jdbc:postgresql://db:5432/shop?user=u"
    );
    assert_eq!(spec["primary_key"][0], "id");
    assert_eq!(sink.delivery(true), Delivery::ExactlyOnce);
    assert_eq!(sink.delivery(false), Delivery::AtLeastOnce);
    let mut registry = Registry::default();
    weir_jdbc::register(&mut registry);
    let back = registry.sink("jdbc", &spec).unwrap();
    assert_eq!(back.spec(), spec);
}

#[tokio::test]
async fn unreachable_database_is_named_after_the_retries() {
    let sink = JdbcSinkFactory::from_options(
        &options(&[
            ("url", "postgresql://weir:s3cret@127.0.0.1:1/shop"),
            ("table-name", "orders"),
            ("sink.max-retries", "1"),
            ("sink.buffer-flush.max-rows", "1"),
        ]),
        "job",
        "orders",
    )
    .unwrap();
    let s = id_tag_schema();
    let mut w = writer(&sink, &s, &info(0, 1, None));
    let e = w
        .write(id_tag(&s, &[(1, "a")]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("postgresql 127.0.0.1:1/shop")
            && e.contains("table orders")
            && e.contains("after 1 retries"),
        "{e}"
    );
    assert!(!e.contains("s3cret"), "{e}");
}

#[test]
fn a_key_or_change_column_must_exist() {
    let db = Db::sqlite();
    let s = id_tag_schema();
    let e = db
        .sink("t", 1)
        .with_primary_key(["nope"])
        .create_writer(s.clone(), &info(0, 1, None))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("nope") && e.contains("id, tag"), "{e}");
    let e = db
        .sink("t", 1)
        .with_op_column("tag")
        .create_writer(s, &info(0, 1, None))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("primary key"), "{e}");
}
