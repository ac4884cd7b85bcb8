//! Command-line flags, named like redis-server's and made from the table:
//! `--config FILE`, and `--<name> VALUE` for every row of [`PARAMS`] that
//! has a flag, parsed by the row's parser. Each overrides the file.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Arg, ArgMatches, Command};

use super::params::{Param, PARAMS};
use super::parse::Value;
use super::Config;

/// The flags given: the file to read and the parameters to set over it.
#[derive(Debug, Clone)]
pub struct Flags {
    /// `--config FILE`: the TOML configuration file, if any.
    pub config: Option<PathBuf>,
    /// The parameters given on the command line, in table order, each with
    /// the value its row's parser made of the flag's text.
    pub values: Vec<(&'static Param, Value)>,
}

impl Flags {
    /// The clap command: `--config` and one flag per row with
    /// [`Param::flag`]; each flag's help is its row's, with the default.
    pub fn command() -> Command {
        let defaults = Config::default();
        let config = Arg::new("config")
            .long("config")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("TOML configuration file (see config/leasehold.example.toml)");
        let params = PARAMS.iter().filter(|p| p.flag).map(|p| {
            let kind = p.kind;
            let default = p.get(&defaults).render();
            let help = match default.is_empty() {
                true => p.help.to_string(),
                false => format!("{} [default: {default}]", p.help),
            };
            Arg::new(p.name)
                .long(p.name)
                .aliases(p.aliases)
                .value_name(kind.value_name())
                .value_parser(move |v: &str| kind.parse(v))
                .help(help)
        });
        Command::new("leasehold-server")
            .version(env!("CARGO_PKG_VERSION"))
            .about("Leasehold: a RESP rate-limit ledger")
            .arg(config)
            .args(params)
    }

    /// The process's flags; prints the error or the help and exits, as clap
    /// does, when they are wrong or ask for help.
    pub fn parse() -> Flags {
        Flags::from_matches(&Flags::command().get_matches())
    }

    /// Flags from `args` (the first is the program's name).
    ///
    /// # Errors
    /// clap's error: an unknown flag, a missing value, or a value its row's
    /// parser refused (with Redis's CONFIG SET text for why).
    pub fn try_parse_from<I, T>(args: I) -> Result<Flags, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Ok(Flags::from_matches(
            &Flags::command().try_get_matches_from(args)?,
        ))
    }

    fn from_matches(m: &ArgMatches) -> Flags {
        Flags {
            config: m.get_one::<PathBuf>("config").cloned(),
            values: PARAMS
                .iter()
                .filter(|p| p.flag)
                .filter_map(|p| Some((p, m.get_one::<Value>(p.name)?.clone())))
                .collect(),
        }
    }

    /// The value given for the parameter `name`, if its flag was given.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values
            .iter()
            .find(|(p, _)| p.name == name)
            .map(|(_, v)| v)
    }

    /// Loads the file named by `--config` (if any), applies the flags over
    /// it and checks the result ([`Config::normalize`]).
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it, or the setting
    /// out of its range.
    pub fn into_config(self) -> Result<Config, String> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        for (p, v) in self.values {
            (p.field.set)(&mut c, v);
        }
        c.normalize()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_flags_are_redis_servers_names() {
        let cmd = Flags::command();
        cmd.clone().debug_assert();
        let longs: BTreeSet<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
        let want = [
            "config",
            "bind",
            "port",
            "requirepass",
            "aclfile",
            "maxmemory",
            "protected-mode",
            "rate-limit-pins",
            "hotkey-split",
            "hotkey-split-share",
            "hotkey-min-rate",
            "hotkey-merge-rate",
            "hotkey-cooldown",
            "metrics-port",
            "maxclients",
            "threads",
            "proto-max-bulk-len",
            "client-query-buffer-limit",
            "hz",
            "loglevel",
            "replicaof",
            "masterauth",
            "replica-priority",
            "dir",
            "dbfilename",
            "save",
            "appendonly",
            "appendfsync",
            "aof-load-truncated",
            "load-corrupt-snapshot",
            "appendfilename",
            "appenddirname",
            "auto-aof-rewrite-percentage",
            "auto-aof-rewrite-min-size",
            "stop-writes-on-bgsave-error",
            "busy-reply-threshold",
            "hash-max-listpack-entries",
            "hash-max-listpack-value",
            "list-max-listpack-size",
            "set-max-intset-entries",
            "set-max-listpack-entries",
            "set-max-listpack-value",
            "zset-max-listpack-entries",
            "zset-max-listpack-value",
            "cluster-enabled",
            "cluster-config-file",
            "cluster-announce-ip",
            "cluster-announce-port",
            "cluster-node-id",
            "cluster-sentinels",
            "tls-port",
            "tls-cert-file",
            "tls-key-file",
            "tls-ca-cert-file",
            "tls-auth-clients",
            "tls-replication",
        ];
        assert_eq!(longs, BTreeSet::from(want));
    }

    #[test]
    fn flags_override_the_file_through_the_rows_parsers() {
        let path =
            std::env::temp_dir().join(format!("leasehold-flags-{}.toml", std::process::id()));
        std::fs::write(&path, "[net]\nport = 7301\nmaxclients = 5\n").unwrap();
        let file = path.to_str().unwrap();
        let args = [
            "leasehold-server",
            "--config",
            file,
            "--maxclients",
            "7",
            "--hz",
            "1000",
        ];
        let c = Flags::try_parse_from(args).unwrap().into_config().unwrap();
        assert_eq!((c.net.port, c.net.maxclients, c.expiry.hz), (7301, 7, 500));
        for bad in [
            ["--maxclients", "0"],
            ["--port", "65536"],
            ["--loglevel", "loud"],
        ] {
            let args = ["leasehold-server"].into_iter().chain(bad);
            assert!(Flags::try_parse_from(args).is_err(), "{bad:?}");
        }
        std::fs::write(&path, "[net]\nmaxclients = 0\n").unwrap();
        let err = Flags::try_parse_from(["leasehold-server", "--config", file])
            .unwrap()
            .into_config()
            .unwrap_err();
        assert_eq!(err, "invalid maxclients: must be 1..=4294967295");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn cluster_sentinels_come_as_a_list_or_comma_separated() {
        let flag = [
            "leasehold-server",
            "--cluster-sentinels",
            "127.0.0.1:26379, h:2",
        ];
        let c = Flags::try_parse_from(flag).unwrap().into_config().unwrap();
        assert_eq!(c.cluster.sentinels, vec!["127.0.0.1:26379", "h:2"]);
        for text in [
            "[cluster]\nsentinels = [\"127.0.0.1:26379\", \"h:2\"]\n",
            "[cluster]\nsentinels = \"127.0.0.1:26379,h:2\"\n",
        ] {
            let c = Config::from_toml(text).unwrap();
            assert_eq!(
                c.cluster.sentinels,
                vec!["127.0.0.1:26379", "h:2"],
                "{text}"
            );
        }
        assert!(Config::from_toml("[cluster]\nsentinels = 3\n").is_err());
    }
}
