//! `dmalab completions SHELL` and `dmalab man [COMMAND]`: generated from
//! the clap definitions the binary parses with, so they cannot drift.

use std::process::ExitCode;

/// `dmalab completions SHELL`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. Install with e.g.
    /// `dmalab completions bash > /etc/bash_completion.d/dmalab`.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `dmalab man [COMMAND...]`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The command whose page to print (`load`, `probe latency`); the
    /// page of dmalab itself without one. Read it with `dmalab man load |
    /// man -l -`.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Prints the completion script of `cmd` for the shell.
pub fn completions(a: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "dmalab", &mut buf);
    crate::write_result_stdout(&String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}

/// Prints the roff man page of `cmd` or of one of its subcommands.
pub fn man(a: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let mut page = cmd;
    // Subcommand pages are named as man pages of git's are: dmalab-load.
    page.build();
    let mut name = "dmalab".to_string();
    for word in &a.command {
        let Some(sub) = page.find_subcommand(word).cloned() else {
            let known: Vec<&str> = page.get_subcommands().map(|c| c.get_name()).collect();
            return Err(dmalab_core::UsageError::new(
                "COMMAND",
                format!(
                    "'{}' is not a command of {name}; use one of {}",
                    dmalab_core::text::escaped(word),
                    known.join(", ")
                ),
            )
            .into());
        };
        name = format!("{name}-{}", sub.get_name());
        page = sub;
    }
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).title(name).render(&mut buf)?;
    crate::write_result_stdout(&String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}
