//! The domain vocabulary the practice repository is written in: one
//! [`Domain`] per module (a class, the things it holds, two amounts, a state,
//! an action and a charge), grouped into packages.

/// One module's worth of vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct Domain {
    /// The package directory (`billing`).
    pub package: &'static str,
    /// The module file stem (`invoices`).
    pub module: &'static str,
    /// The class name (`Invoice`).
    pub class: &'static str,
    /// The class in words (`invoice`).
    pub noun: &'static str,
    /// What the class holds, singular (`line`).
    pub item: &'static str,
    /// Two amounts: (identifier, words), e.g. `("total", "invoice total")`.
    pub amounts: [(&'static str, &'static str); 2],
    /// A state adjective for `is_<state>` (`overdue`).
    pub state: &'static str,
    /// An action and its past participle (`void`, `voided`).
    pub action: (&'static str, &'static str),
    /// A charge method, its numeric parameter and the parameter in words.
    pub charge: (&'static str, &'static str, &'static str),
}

/// Positional constructor that keeps the table below one line per domain.
#[allow(clippy::too_many_arguments)]
const fn d(
    package: &'static str,
    module: &'static str,
    class: &'static str,
    noun: &'static str,
    item: &'static str,
    amounts: [(&'static str, &'static str); 2],
    state: &'static str,
    action: (&'static str, &'static str),
    charge: (&'static str, &'static str, &'static str),
) -> Domain {
    Domain { package, module, class, noun, item, amounts, state, action, charge }
}

/// Every domain the generator can draw from.
pub const DOMAINS: &[Domain] = &[
    d("billing", "invoices", "Invoice", "invoice", "line", [("total", "invoice total"), ("tax", "tax amount")], "overdue", ("void", "voided"), ("late_fee", "days_late", "days late")),
    d("billing", "payments", "Payment", "payment", "installment", [("amount", "payment amount"), ("fee", "processing fee")], "settled", ("refund", "refunded"), ("retry_fee", "attempts", "retry attempts")),
    d("billing", "subscriptions", "Subscription", "subscription", "addon", [("price", "subscription price"), ("credit", "account credit")], "expired", ("cancel", "cancelled"), ("overage_charge", "extra_seats", "extra seats")),
    d("inventory", "stock", "StockItem", "stock item", "batch", [("quantity", "stock quantity"), ("reorder_level", "reorder level")], "depleted", ("reserve", "reserved"), ("holding_cost", "days_stored", "days in storage")),
    d("inventory", "warehouses", "Warehouse", "warehouse", "bin", [("capacity", "warehouse capacity"), ("occupancy", "bin occupancy")], "full", ("close", "closed"), ("overflow_fee", "extra_pallets", "extra pallets")),
    d("inventory", "suppliers", "Supplier", "supplier", "contract", [("lead_time", "lead time"), ("min_order", "minimum order")], "inactive", ("suspend", "suspended"), ("delay_penalty", "days_delayed", "days of delay")),
    d("shipping", "parcels", "Parcel", "parcel", "package", [("weight", "parcel weight"), ("volume", "parcel volume")], "oversized", ("hold", "held"), ("weight_surcharge", "weight_kg", "weight in kg")),
    d("shipping", "quotes", "ShippingQuote", "shipping quote", "leg", [("cost", "shipping cost"), ("distance", "delivery distance")], "stale", ("withdraw", "withdrawn"), ("distance_surcharge", "distance_km", "distance in km")),
    d("shipping", "carriers", "Carrier", "carrier", "route", [("rate", "carrier rate"), ("capacity", "daily capacity")], "overbooked", ("suspend", "suspended"), ("fuel_surcharge", "liters", "fuel liters")),
    d("customers", "accounts", "CustomerAccount", "customer account", "contact", [("balance", "account balance"), ("credit_limit", "credit limit")], "dormant", ("close", "closed"), ("overdraft_fee", "overdrawn_by", "overdrawn amount")),
    d("customers", "loyalty", "LoyaltyCard", "loyalty card", "reward", [("points", "loyalty points"), ("tier_bonus", "tier bonus")], "expired", ("freeze", "frozen"), ("bonus_points", "nights", "nights stayed")),
    d("orders", "carts", "Cart", "cart", "entry", [("subtotal", "cart subtotal"), ("discount", "cart discount")], "abandoned", ("clear", "cleared"), ("handling_fee", "bulky_items", "bulky items")),
    d("orders", "returns", "ReturnRequest", "return request", "article", [("refund", "refund amount"), ("restocking", "restocking fee")], "late", ("reject", "rejected"), ("restocking_charge", "days_since_delivery", "days since delivery")),
];

/// Commit authors (name, email).
pub const AUTHORS: &[(&str, &str)] = &[
    ("Ada Moreau", "ada@practice.dev"),
    ("Bruno Keller", "bruno@practice.dev"),
    ("Chen Wei", "chen@practice.dev"),
    ("Dana Okafor", "dana@practice.dev"),
    ("Emil Novak", "emil@practice.dev"),
];

/// Alternative names for locals, by the local's original name.
pub const LOCAL_NAMES: &[&[&str]] = &[
    &["subtotal", "running_total", "amount_due", "accumulated"],
    &["reduced", "discounted", "net_amount", "after_discount"],
    &["cleaned", "stripped", "normalized", "raw_value"],
    &["text", "rendered", "label", "display"],
    &["cents", "minor_units", "whole_cents", "in_cents"],
    &["charge", "fee", "penalty", "extra"],
    &["age", "elapsed", "days_open", "lifetime"],
    &["value", "parsed", "number", "amount"],
];

/// Alternatives for `name` (the other names of its [`LOCAL_NAMES`] group).
pub fn local_alternatives(name: &str) -> Vec<&'static str> {
    LOCAL_NAMES.iter().find(|g| g.contains(&name)).map(|g| g.iter().copied().filter(|n| *n != name).collect()).unwrap_or_default()
}

/// `a` or `an` before `word`.
pub fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// `words in text` -> `words_in_text`.
pub fn snake(words: &str) -> String {
    words.replace(' ', "_")
}

/// `SCREAMING_CASE` of an identifier.
pub fn upper(ident: &str) -> String {
    ident.to_ascii_uppercase()
}
