-- Sample business schema (T-SQL, Azure SQL). Run by the deployment's postprovision hook, then data.sql.
-- Idempotent: drops and recreates the tables in the default schema (dbo).
DROP TABLE IF EXISTS dbo.returns;
DROP TABLE IF EXISTS dbo.order_items;
DROP TABLE IF EXISTS dbo.orders;
DROP TABLE IF EXISTS dbo.customer_contacts;
DROP TABLE IF EXISTS dbo.customers;
DROP TABLE IF EXISTS dbo.products;
DROP TABLE IF EXISTS dbo.categories;
DROP TABLE IF EXISTS dbo.regions;

CREATE TABLE dbo.regions (
    region_id INT NOT NULL PRIMARY KEY,
    name NVARCHAR(50) NOT NULL UNIQUE
);

CREATE TABLE dbo.categories (
    category_id INT NOT NULL PRIMARY KEY,
    name NVARCHAR(50) NOT NULL UNIQUE
);

CREATE TABLE dbo.products (
    product_id INT NOT NULL PRIMARY KEY,
    name NVARCHAR(100) NOT NULL UNIQUE,
    category_id INT NOT NULL REFERENCES dbo.categories (category_id),
    list_price DECIMAL(10, 2) NOT NULL
);

CREATE TABLE dbo.customers (
    customer_id INT NOT NULL PRIMARY KEY,
    name NVARCHAR(100) NOT NULL,
    segment NVARCHAR(20) NOT NULL CHECK (segment IN ('Consumer', 'Business')),
    region_id INT NOT NULL REFERENCES dbo.regions (region_id),
    signup_date DATE NOT NULL
);

-- Sensitive: personal contact data. Not in the default SQL allow-list; grant no SELECT on it.
CREATE TABLE dbo.customer_contacts (
    customer_id INT NOT NULL PRIMARY KEY REFERENCES dbo.customers (customer_id),
    email NVARCHAR(200) NOT NULL,
    phone NVARCHAR(50) NOT NULL
);

CREATE TABLE dbo.orders (
    order_id INT NOT NULL PRIMARY KEY,
    customer_id INT NOT NULL REFERENCES dbo.customers (customer_id),
    region_id INT NOT NULL REFERENCES dbo.regions (region_id),
    order_date DATE NOT NULL,
    channel NVARCHAR(20) NOT NULL CHECK (channel IN ('Online', 'Store'))
);

CREATE TABLE dbo.order_items (
    order_item_id INT NOT NULL PRIMARY KEY,
    order_id INT NOT NULL REFERENCES dbo.orders (order_id),
    product_id INT NOT NULL REFERENCES dbo.products (product_id),
    quantity INT NOT NULL CHECK (quantity > 0),
    unit_price DECIMAL(10, 2) NOT NULL
);

CREATE TABLE dbo.returns (
    return_id INT NOT NULL PRIMARY KEY,
    order_item_id INT NOT NULL REFERENCES dbo.order_items (order_item_id),
    return_date DATE NOT NULL,
    reason NVARCHAR(50) NOT NULL,
    quantity INT NOT NULL CHECK (quantity > 0),
    refund_amount DECIMAL(10, 2) NOT NULL,
    -- At most one return per order line.
    CONSTRAINT uq_returns_order_item UNIQUE (order_item_id)
);

CREATE INDEX ix_orders_date ON dbo.orders (order_date);
CREATE INDEX ix_orders_customer ON dbo.orders (customer_id);
CREATE INDEX ix_order_items_order ON dbo.order_items (order_id);
CREATE INDEX ix_order_items_product ON dbo.order_items (product_id);
CREATE INDEX ix_returns_date ON dbo.returns (return_date);
