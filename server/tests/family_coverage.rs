//! Every command in the table has an in-process test: each family's rows
//! are called (`"NAME ...` or `"NAME"`, in any case) in that family's test
//! file, so a new row without one fails here.

use leasehold_server::commands::{self, table, CommandSpec};

/// Each family's rows and the source of its in-process test file.
const FAMILIES: &[(&str, &[CommandSpec], &str)] = &[
    (
        "family_connection.rs",
        commands::connection::COMMANDS,
        include_str!("family_connection.rs"),
    ),
    (
        "family_server.rs",
        commands::server::COMMANDS,
        include_str!("family_server.rs"),
    ),
    (
        "family_keys.rs",
        commands::keys::COMMANDS,
        include_str!("family_keys.rs"),
    ),
    (
        "family_moves.rs",
        commands::moves::COMMANDS,
        include_str!("family_moves.rs"),
    ),
    (
        "family_introspect.rs",
        commands::introspect::COMMANDS,
        include_str!("family_introspect.rs"),
    ),
    (
        "family_strings.rs",
        commands::strings::COMMANDS,
        include_str!("family_strings.rs"),
    ),
    (
        "family_ratelimit.rs",
        commands::ratelimit::COMMANDS,
        include_str!("family_ratelimit.rs"),
    ),
    (
        "family_pins.rs",
        commands::pins::COMMANDS,
        include_str!("family_pins.rs"),
    ),
    (
        "family_replication.rs",
        commands::replication::COMMANDS,
        include_str!("family_replication.rs"),
    ),
    (
        "family_transaction.rs",
        commands::transaction::COMMANDS,
        include_str!("family_transaction.rs"),
    ),
    (
        "family_pubsub.rs",
        commands::pubsub::COMMANDS,
        include_str!("family_pubsub.rs"),
    ),
    (
        "family_scripting.rs",
        commands::scripting::COMMANDS,
        include_str!("family_scripting.rs"),
    ),
    (
        "family_persistence.rs",
        commands::persistence::COMMANDS,
        include_str!("family_persistence.rs"),
    ),
    (
        "family_lists.rs",
        commands::lists::COMMANDS,
        include_str!("family_lists.rs"),
    ),
    (
        "family_cluster.rs",
        commands::cluster::COMMANDS,
        include_str!("family_cluster.rs"),
    ),
    (
        "family_hashes.rs",
        commands::hashes::COMMANDS,
        include_str!("family_hashes.rs"),
    ),
    (
        "family_sets.rs",
        commands::sets::COMMANDS,
        include_str!("family_sets.rs"),
    ),
    (
        "family_zsets.rs",
        commands::zsets::COMMANDS,
        include_str!("family_zsets.rs"),
    ),
    (
        "family_acl.rs",
        commands::acl::COMMANDS,
        include_str!("family_acl.rs"),
    ),
];

#[test]
fn every_family_has_a_test_file() {
    let covered: usize = FAMILIES.iter().map(|f| f.1.len()).sum();
    assert_eq!(
        covered,
        table().commands.len(),
        "a family of the command table has no entry (and test file) in FAMILIES"
    );
}

#[test]
fn every_command_is_called_in_its_family_test() {
    let mut missing = Vec::new();
    for (file, rows, source) in FAMILIES {
        let upper = source.to_ascii_uppercase();
        for row in *rows {
            let name = row.name.to_ascii_uppercase();
            let called = [format!("\"{name} "), format!("\"{name}\"")]
                .iter()
                .any(|p| upper.contains(p.as_str()));
            if !called {
                missing.push(format!("{} in {file}", row.name));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "commands no in-process test calls: {missing:?}"
    );
}
