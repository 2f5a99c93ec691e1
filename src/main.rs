//! The command line: parse, load the configuration, serve. Nothing else.

use clap::Parser;
use lance_gateway::config::{Cli, Command, Config, KeysCommand, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => *args,
        Command::Admin(command) => {
            // Progress and warnings to stderr; the answer alone on stdout.
            tracing_subscriber::fmt()
                .with_env_filter(
                    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
                )
                .with_writer(std::io::stderr)
                .init();
            let code = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt.block_on(lance_gateway::admin::run(command)),
                Err(e) => {
                    eprintln!("lance-gateway: cannot start the runtime: {e}");
                    2
                }
            };
            std::process::exit(code);
        }
        Command::Keys(KeysCommand::Create { principal, groups }) => {
            match lance_gateway::auth::keys::create(&principal, &groups) {
                Ok((key, line)) => {
                    println!("API key for {principal} (hand it over; it is not stored anywhere):");
                    println!("{key}");
                    println!("Add this line to the --api-keys file:");
                    println!("{line}");
                    std::process::exit(0);
                }
                Err(e) => {
                    eprintln!("lance-gateway: {e}");
                    std::process::exit(2);
                }
            }
        }
    };
    let config = match Config::load(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lance-gateway: {e}");
            std::process::exit(2);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init(),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lance-gateway: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async {
        let parts = match lance_gateway::server::build_parts(&config, true).await {
            Ok(parts) => parts,
            Err(e) => {
                eprintln!("lance-gateway: {e}");
                return 2;
            }
        };
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "lance-gateway: invalid setting `listen`: cannot bind {}: {e}",
                    config.listen
                );
                return 2;
            }
        };
        match lance_gateway::server::serve(config, parts, listener).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("lance-gateway: {e}");
                if e.starts_with("invalid setting") {
                    2
                } else {
                    1
                }
            }
        }
    });
    std::process::exit(code);
}
