-- +goose Up
-- Requests checked at one instant are recorded at that instant (see the
-- SQLite migration 9): seq joins the requests' key, total the finished
-- tokens'. Every row is kept as it is.
ALTER TABLE requests DROP CONSTRAINT requests_pkey, ADD PRIMARY KEY (user_id, ts, seq);
ALTER TABLE call_tokens DROP CONSTRAINT call_tokens_pkey, ADD PRIMARY KEY (user_id, ts, total);

-- +goose Down
-- Rows at one instant move apart by a microsecond each, as the old store
-- recorded them; every row is kept.
UPDATE requests AS r SET ts = s.ts FROM (
    SELECT user_id, seq, max(ts - seq) OVER (PARTITION BY user_id ORDER BY seq) + seq AS ts FROM requests
) AS s WHERE r.user_id = s.user_id AND r.seq = s.seq AND r.ts <> s.ts;
UPDATE call_tokens AS c SET ts = s.ts FROM (
    SELECT user_id, total, max(ts - rank) OVER (PARTITION BY user_id ORDER BY total) + rank AS ts
    FROM (SELECT user_id, ts, total, row_number() OVER (PARTITION BY user_id ORDER BY total) AS rank FROM call_tokens) AS k
) AS s WHERE c.user_id = s.user_id AND c.total = s.total AND c.ts <> s.ts;
ALTER TABLE requests DROP CONSTRAINT requests_pkey, ADD PRIMARY KEY (user_id, ts);
ALTER TABLE call_tokens DROP CONSTRAINT call_tokens_pkey, ADD PRIMARY KEY (user_id, ts);
