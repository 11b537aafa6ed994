//! The sink against real SQLite files.

mod common;

use common::scenarios::*;
use common::*;

#[tokio::test]
async fn sqlite_appends_without_checkpoints() {
    append_without_checkpoints(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_flushes_after_the_interval() {
    interval_flush(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_upserts_keep_the_last_row_and_delete() {
    upsert_with_deletes(&Db::sqlite(), "totals", false).await;
    upsert_with_deletes(&Db::sqlite(), "totals", true).await;
}

#[tokio::test]
async fn sqlite_refuses_a_table_that_does_not_fit() {
    mismatch_is_refused(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_hostile_names_and_values_are_data() {
    hostile_names_and_values(&Db::sqlite(), false).await;
    hostile_names_and_values(&Db::sqlite(), true).await;
}

#[tokio::test]
async fn sqlite_restore_from_2_keeps_epochs_1_and_2() {
    let db = Db::sqlite();
    crash_after_two_barriers(&db, "t").await;
    restore_and_replay(&db, "t", 2).await;
    assert_eq!(progress(&db).await, vec!["test-job|out|0|3"]);
}

#[tokio::test]
async fn sqlite_restore_from_1_keeps_epoch_1() {
    let db = Db::sqlite();
    crash_after_two_barriers(&db, "t").await;
    restore_and_replay(&db, "t", 1).await;
}

#[tokio::test]
async fn sqlite_restore_at_another_parallelism() {
    restore_at_another_parallelism(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_fresh_start_clears_staging() {
    fresh_start_clears_staging(&Db::sqlite()).await;
}

#[tokio::test]
async fn sqlite_smallint_tinyint_date_and_time_round_trip() {
    let db = Db::sqlite();
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
        db.texts("SELECT name || ' ' || type FROM pragma_table_info('calendar')")
            .await,
        vec![
            "dt DATE",
            "early DATE",
            "sm SMALLINT",
            "tm TIME",
            "tm3 TIME",
            "tn SMALLINT"
        ]
    );
}

#[tokio::test]
async fn sqlite_every_type_round_trips() {
    let db = Db::sqlite();
    let row = "9007199254740993|-7|1.5|0.25|1|-12.5|héllo|2024-02-29T12:34:56.789Z";
    let nulls = "NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL";
    assert_eq!(every_type(&db).await, vec![row, row, nulls, nulls]);
    assert_eq!(
        db.texts("SELECT tz FROM types WHERE tz IS NOT NULL").await,
        vec!["2024-02-29T12:34:56.789Z"; 2]
    );
    assert_eq!(
        db.texts("SELECT name || ' ' || type FROM pragma_table_info('types')")
            .await,
        vec![
            "amount NUMERIC(10,2)",
            "b BIGINT",
            "d DOUBLE",
            "f REAL",
            "i INTEGER",
            "ok BOOLEAN",
            "s TEXT",
            "ts TIMESTAMP",
            "tz TIMESTAMP"
        ]
    );
}

#[tokio::test]
async fn sqlite_two_jobs_with_checkpoints_write_one_table() {
    two_jobs_with_checkpoints_write_one_table(&Db::sqlite()).await;
}
