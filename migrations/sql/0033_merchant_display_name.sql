-- The name a merchant shows its customers on the checkout and /account pages (its 8-letter
-- code otherwise). Set from the dashboard; checked by the API (no control or bidirectional
-- override characters), bounded here too.
ALTER TABLE merchants
    ADD COLUMN display_name TEXT CHECK (display_name IS NULL OR char_length(display_name) BETWEEN 1 AND 60);
