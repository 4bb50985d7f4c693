-- 020_per_class: an epoch's test accuracy per class (issue 33): a JSON array, one fraction
-- in [0, 1] per class of the dataset, null for a class its test split lacks; NULL when the
-- epoch was not evaluated or its engine sent none (runs before this migration).

ALTER TABLE epochs ADD COLUMN test_acc_per_class TEXT;
