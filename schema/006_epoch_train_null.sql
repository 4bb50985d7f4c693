-- 006_epoch_train_null: an epoch's train_loss and train_acc may be NULL. An epoch that
-- trained on no sample has no loss, and storing it as 0 (as 002's NOT NULL forced) reads
-- as a perfect loss; NULL is served as null. SQLite drops NOT NULL only by rebuilding the
-- table (db_migrate runs every migration with foreign keys off and checks them before it
-- commits). The zeros stored for such epochs (samples = 0) become NULL; every other row
-- is copied as it is. Columns are those of 002 in order.

CREATE TABLE epochs_new (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    repeat     INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    samples    INTEGER NOT NULL,
    train_loss REAL,
    train_acc  REAL,
    test_loss  REAL,
    test_acc   REAL,
    time_s     REAL NOT NULL,
    PRIMARY KEY (run_id, repeat, epoch)
) WITHOUT ROWID;
INSERT INTO epochs_new (run_id, repeat, epoch, samples, train_loss, train_acc, test_loss,
                        test_acc, time_s)
    SELECT run_id, repeat, epoch, samples,
           CASE WHEN samples = 0 THEN NULL ELSE train_loss END,
           CASE WHEN samples = 0 THEN NULL ELSE train_acc END,
           test_loss, test_acc, time_s FROM epochs;
DROP TABLE epochs;
ALTER TABLE epochs_new RENAME TO epochs;
