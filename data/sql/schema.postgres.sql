-- Sample business schema (PostgreSQL). Loaded before data.sql by the tests (shared/providers/sql/sampledata.py
-- postgres_load_sql) or by hand: psql -f schema.postgres.sql -f data.sql. Grant the app's login role SELECT on
-- every table but customer_contacts, and give that one to a second role only (see docs/settings.md).
-- Dates are DATE values; money is NUMERIC with two decimals.
DROP TABLE IF EXISTS returns CASCADE;
DROP TABLE IF EXISTS order_items CASCADE;
DROP TABLE IF EXISTS orders CASCADE;
DROP TABLE IF EXISTS customer_contacts CASCADE;
DROP TABLE IF EXISTS customers CASCADE;
DROP TABLE IF EXISTS products CASCADE;
DROP TABLE IF EXISTS categories CASCADE;
DROP TABLE IF EXISTS regions CASCADE;

CREATE TABLE regions (
    region_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

CREATE TABLE categories (
    category_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    category_id INTEGER NOT NULL REFERENCES categories (category_id),
    list_price NUMERIC(10, 2) NOT NULL
);

CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    segment TEXT NOT NULL CHECK (segment IN ('Consumer', 'Business')),
    region_id INTEGER NOT NULL REFERENCES regions (region_id),
    signup_date DATE NOT NULL
);

-- Sensitive: personal contact data. Not in the default SQL allow-list.
CREATE TABLE customer_contacts (
    customer_id INTEGER PRIMARY KEY REFERENCES customers (customer_id),
    email TEXT NOT NULL,
    phone TEXT NOT NULL
);

CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
    region_id INTEGER NOT NULL REFERENCES regions (region_id),
    order_date DATE NOT NULL,
    channel TEXT NOT NULL CHECK (channel IN ('Online', 'Store'))
);

CREATE TABLE order_items (
    order_item_id INTEGER PRIMARY KEY,
    order_id INTEGER NOT NULL REFERENCES orders (order_id),
    product_id INTEGER NOT NULL REFERENCES products (product_id),
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    unit_price NUMERIC(10, 2) NOT NULL
);

CREATE TABLE returns (
    return_id INTEGER PRIMARY KEY,
    order_item_id INTEGER NOT NULL REFERENCES order_items (order_item_id),
    return_date DATE NOT NULL,
    reason TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    refund_amount NUMERIC(10, 2) NOT NULL,
    -- At most one return per order line.
    CONSTRAINT uq_returns_order_item UNIQUE (order_item_id)
);

CREATE INDEX ix_orders_date ON orders (order_date);
CREATE INDEX ix_orders_customer ON orders (customer_id);
CREATE INDEX ix_order_items_order ON order_items (order_id);
CREATE INDEX ix_order_items_product ON order_items (product_id);
CREATE INDEX ix_returns_date ON returns (return_date);
