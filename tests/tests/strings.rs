//! The string commands over TCP, on 1 and 2 threads, on a hand-set clock:
//! INCR and its family read integers strictly and refuse to overflow i64.

use leasehold_tests::{manual_server, on_1_and_2_threads};

on_1_and_2_threads! {
    fn i1_strict_integers(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let not_int = "-ERR value is not an integer or out of range\r\n";
        for v in ["    11", "11    ", "+1", "01", "-0", "1e3"] {
            assert_eq!(c.call_args(&[b"SET", b"k", v.as_bytes()]), "+OK\r\n");
            assert_eq!(c.call("INCR k"), not_int, "INCR of {v:?}");
            assert_eq!(c.call("GET k"), format!("${}\r\n{v}\r\n", v.len()), "{v:?} unchanged");
        }
        c.script(&[
            ("SET k 5", "+OK\r\n"),
            ("INCRBY k +1", not_int),
            ("GET k", "$1\r\n5\r\n"),
            ("SET k 1e3", "+OK\r\n"),
            ("INCRBYFLOAT k 1", "$4\r\n1001\r\n"),
        ]);
        assert_eq!(c.call_args(&[b"SET", b"k", b" 11 "]), "+OK\r\n");
        assert_eq!(c.call("INCRBYFLOAT k 1"), "-ERR value is not a valid float\r\n");
    }

    fn i2_edges_of_i64(threads) {
        let (server, _clock) = manual_server(threads);
        let mut c = server.raw();
        let overflow = "-ERR increment or decrement would overflow\r\n";
        c.script(&[
            ("SET n 9223372036854775806", "+OK\r\n"),
            ("INCR n", ":9223372036854775807\r\n"),
            ("INCR n", overflow),
            ("GET n", "$19\r\n9223372036854775807\r\n"),
            ("SET n 100", "+OK\r\n"),
            ("INCRBY n 9223372036854775807", overflow),
            ("GET n", "$3\r\n100\r\n"),
            ("SET x 0", "+OK\r\n"),
            ("DECRBY x -9223372036854775808", "-ERR decrement would overflow\r\n"),
            ("GET x", "$1\r\n0\r\n"),
            ("SET m -9223372036854775808", "+OK\r\n"),
            ("DECR m", overflow),
            ("GET m", "$20\r\n-9223372036854775808\r\n"),
        ]);
    }
}
