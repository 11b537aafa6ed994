//! The sink against a real PostgreSQL server: run with scripts/test, which starts one and
//! sets WEIR_POSTGRES_URL (ignored by a plain `cargo test`).

mod common;

use common::scenarios::*;
use common::*;

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_appends_without_checkpoints() {
    append_without_checkpoints(&Db::postgres("append").await).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_flushes_after_the_interval() {
    interval_flush(&Db::postgres("interval").await).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_upserts_keep_the_last_row_and_delete() {
    upsert_with_deletes(&Db::postgres("upsert").await, "totals", false).await;
    upsert_with_deletes(&Db::postgres("upsert_cp").await, "totals", true).await;
    // A table named with its schema.
    for checkpoints in [false, true] {
        let db = Db::postgres("upsert_qualified").await;
        let Db::Postgres(schema) = &db else {
            unreachable!()
        };
        let table = format!("{}.totals", schema.name);
        upsert_with_deletes(&db, &table, checkpoints).await;
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_refuses_a_table_that_does_not_fit() {
    mismatch_is_refused(&Db::postgres("mismatch").await).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_hostile_names_and_values_are_data() {
    hostile_names_and_values(&Db::postgres("hostile").await, false).await;
    hostile_names_and_values(&Db::postgres("hostile_cp").await, true).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_restore_from_2_keeps_epochs_1_and_2() {
    let db = Db::postgres("restore2").await;
    crash_after_two_barriers(&db, "t").await;
    restore_and_replay(&db, "t", 2).await;
    assert_eq!(progress(&db).await, vec!["test-job|out|0|3"]);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_restore_from_1_keeps_epoch_1() {
    let db = Db::postgres("restore1").await;
    crash_after_two_barriers(&db, "t").await;
    restore_and_replay(&db, "t", 1).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_restore_at_another_parallelism() {
    restore_at_another_parallelism(&Db::postgres("rescale").await).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_fresh_start_clears_staging() {
    fresh_start_clears_staging(&Db::postgres("fresh").await).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_every_type_round_trips() {
    let db = Db::postgres("types").await;
    let row = "9007199254740993|-7|1.5|0.25|true|-12.50|héllo|2024-02-29 12:34:56.789";
    let nulls = "NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL";
    assert_eq!(every_type(&db).await, vec![row, row, nulls, nulls]);
    assert_eq!(
        db.texts(
            "SELECT CAST(CAST(EXTRACT(EPOCH FROM tz) * 1000 AS BIGINT) AS TEXT) FROM types \
             WHERE tz IS NOT NULL"
        )
        .await,
        vec!["1709210096789"; 2]
    );
    assert_eq!(
        db.texts(
            "SELECT column_name || ' ' || format_type(a.atttypid, a.atttypmod) \
             FROM information_schema.columns c JOIN pg_attribute a \
             ON a.attrelid = 'types'::regclass AND a.attname = c.column_name \
             WHERE c.table_name = 'types' AND c.table_schema = current_schema()"
        )
        .await,
        vec![
            "amount numeric(10,2)",
            "b bigint",
            "d double precision",
            "f real",
            "i integer",
            "ok boolean",
            "s text",
            "ts timestamp(3) without time zone",
            "tz timestamp(3) with time zone"
        ]
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_smallint_tinyint_date_and_time_round_trip() {
    let db = Db::postgres("calendar").await;
    let mut lines = calendar_types(&db).await;
    lines.sort();
    assert_eq!(
        lines,
        [
            "-32768|127|2024-02-29|1969-12-31|23:59:59|10:11:12.5",
            "NULL|NULL|NULL|NULL|NULL|NULL"
        ]
    );
    assert_eq!(
        db.texts(
            "SELECT column_name || ' ' || format_type(a.atttypid, a.atttypmod) \
             FROM information_schema.columns c JOIN pg_attribute a \
             ON a.attrelid = 'calendar'::regclass AND a.attname = c.column_name \
             WHERE c.table_name = 'calendar' AND c.table_schema = current_schema()"
        )
        .await,
        vec![
            "dt date",
            "early date",
            "sm smallint",
            "tm time(0) without time zone",
            "tm3 time(3) without time zone",
            "tn smallint"
        ]
    );
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_accepts_varchar_timestamptz_and_wider_numeric() {
    let db = Db::postgres("wider").await;
    db.exec(
        "CREATE TABLE types (b bigint, i integer, d double precision, f real, ok boolean, \
             amount numeric(20,2), s varchar(40), ts timestamptz, tz timestamp, extra text)",
    )
    .await;
    let lines = every_type(&db).await;
    assert_eq!(lines.len(), 4);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_current_schema_in_the_url_places_the_tables() {
    let schema = weir_testkit::postgres::fresh_schema("current_schema").await;
    let base = weir_testkit::postgres::url();
    let sep = if base.contains('?') { '&' } else { '?' };
    let options = [
        (
            "url",
            format!("jdbc:{base}{sep}currentSchema={}", schema.name),
        ),
        ("table-name", "placed".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let sink = weir_jdbc::JdbcSinkFactory::from_options(&options, "j", "s").unwrap();
    let s = id_tag_schema();
    let mut w = writer(&sink, &s, &info(0, 1, Some(None)));
    w.write(id_tag(&s, &[(1, "a")])).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    let db = Db::Postgres(schema);
    assert_eq!(db.lines("placed", &["id", "tag"]).await, vec!["1|a"]);
    assert_eq!(
        db.count(&weir_jdbc::staging_table_name("placed", "j", "s"))
            .await,
        0
    );
    assert_eq!(progress(&db).await, vec!["j|s|0|1"]);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_two_jobs_with_checkpoints_write_one_table() {
    two_jobs_with_checkpoints_write_one_table(&Db::postgres("shared").await).await;
}

/// Issue #25 item 14: a role that may INSERT into an existing table but not CREATE in its
/// schema writes it (the sink no longer issues CREATE TABLE IF NOT EXISTS for a table that
/// is there); with checkpoints, where the staging table is missing, the refusal names the
/// privilege and what to create.
#[tokio::test]
#[ignore = "needs PostgreSQL: run scripts/test"]
async fn postgres_a_role_that_may_insert_but_not_create_writes_an_existing_table() {
    let schema = weir_testkit::postgres::fresh_schema("insert_only").await;
    let role = format!("weir_insert_only_{}", std::process::id());
    let db = Db::Postgres(schema.clone());
    db.exec(&format!(
        "CREATE TABLE placed (id BIGINT, tag TEXT);
         DROP ROLE IF EXISTS {role};
         CREATE ROLE {role} LOGIN;
         GRANT USAGE ON SCHEMA {s} TO {role};
         GRANT SELECT, INSERT ON placed TO {role};",
        s = schema.name
    ))
    .await;
    let url = format!(
        "jdbc:{}",
        schema.url.replacen("postgres@", &format!("{role}@"), 1)
    );
    let options = [("url", url), ("table-name", "placed".to_string())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let sink = weir_jdbc::JdbcSinkFactory::from_options(&options, "j", "s").unwrap();
    let s = id_tag_schema();
    let mut w = writer(&sink, &s, &info(0, 1, None));
    w.write(id_tag(&s, &[(1, "a"), (2, "b")])).await.unwrap();
    w.finish().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(db.lines("placed", &["id", "tag"]).await, vec!["1|a", "2|b"]);

    let mut w = writer(&sink, &s, &info(0, 1, Some(None)));
    w.write(id_tag(&s, &[(3, "c")])).await.unwrap();
    let err = w.finish().await.unwrap_err().to_string();
    assert!(
        err.contains("permission denied") && err.contains("CREATE privilege"),
        "{err}"
    );
}
