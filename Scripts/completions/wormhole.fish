function __wormhole_should_offer_completions_for_flags_or_options -a expected_commands
    set -l non_repeating_flags_or_options $argv[2..]
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __wormhole_parse_tokens
    test "$commands" = "$expected_commands"; and return $non_repeating_flags_or_options_absent
end

function __wormhole_should_offer_completions_for_positional -a expected_commands positional_index_comparison expected_positional_index
    set -l non_repeating_flags_or_options
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __wormhole_parse_tokens
    test "$commands" = "$expected_commands" -a \( "$positional_index" "$positional_index_comparison" "$expected_positional_index" \)
end

function __wormhole_parse_tokens -S
    set -l unparsed_tokens (__wormhole_tokens -pc)
    switch $unparsed_tokens[1]
    case 'wormhole'
        __wormhole_parse_subcommand 0 'version' 'h/help'
        switch $unparsed_tokens[1]
        case 'send'
            __wormhole_parse_subcommand 2 'file=' 'identifier-file=' 'json' 'lines' 'ttl=' 'print-sequence' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'listen'
            __wormhole_parse_subcommand -r 1 'identifier-file=' 'all' 'c/count=' 't/timeout=' 'history' 'latest' 'durable=' 'queue=' 'max-deliveries=' 'dead-letters=' 'exit-when-idle=' 'retry-delay=' 'max-retry-delay=' 'no-follow' 'json' 'prefix' 'raw' 'v/verbose' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'request'
            __wormhole_parse_subcommand 2 'file=' 'identifier-file=' 't/timeout=' 'json' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'respond'
            __wormhole_parse_subcommand -r 2 'identifier-file=' 'c/count=' 'exit-when-idle=' 'v/verbose' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'read'
            __wormhole_parse_subcommand 1 'json' 'raw' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'clear'
            __wormhole_parse_subcommand -r 1 'all' 'y/yes' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'list'
            __wormhole_parse_subcommand 0 'json' 'all' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'status'
            __wormhole_parse_subcommand -r 1 'json' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'forget'
            __wormhole_parse_subcommand -r 2 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'doctor'
            __wormhole_parse_subcommand 0 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'share'
            __wormhole_parse_subcommand 1 'unix-group=' 'revoke' 'version' 'h/help'
        case 'top'
            __wormhole_parse_subcommand 0 'i/interval=' 'c/count=' 'json' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'post'
            __wormhole_parse_subcommand -r 1 'state=' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'observe'
            __wormhole_parse_subcommand -r 1 'c/count=' 't/timeout=' 'state' 'v/verbose' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'path'
            __wormhole_parse_subcommand 0 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'activation'
            __wormhole_parse_subcommand -r 2 'name=' 'user' 'system' 'run-as=' 'o/output=' 'print' 'group=' 'directory=' 'optional-directory=' 'version' 'h/help'
        case 'help'
            __wormhole_parse_subcommand -r 1 'version'
        end
    end
end

function __wormhole_tokens
    if test (string split -m 1 -f 1 -- . "$FISH_VERSION") -gt 3
        commandline --tokens-raw $argv
    else
        commandline -o $argv
    end
end

function __wormhole_parse_subcommand -S -a positional_count
    argparse -s r -- $argv
    set -l option_specs $argv[2..]
    set -l is_repeating_positional $_flag_r
    set -el _flag_r
    set -a commands $unparsed_tokens[1]
    set positional_index 0
    while true
        set -e unparsed_tokens[1]
        argparse -sn "$commands" $option_specs -- $unparsed_tokens 2> /dev/null
        set unparsed_tokens $argv
        set positional_index (math $positional_index + 1)
        for non_repeating_flag_or_option in $non_repeating_flags_or_options
            if set -ql "_flag_$(string replace -a - _ -- $non_repeating_flag_or_option)"
                set non_repeating_flags_or_options_absent 1
                break
            end
        end
        test (count $unparsed_tokens) -eq 0 -o \( -z "$is_repeating_positional" -a "$positional_index" -gt "$positional_count" \) && break
    end
end

function __wormhole_complete_directories
    set -l token (commandline -t)
    string match -- '*/' $token
    set -l subdirs $token*/
    printf %s\n $subdirs
end

function __wormhole_custom_completion
    set -x SAP_SHELL fish
    set -x SAP_SHELL_VERSION $FISH_VERSION
    set -l tokens (__wormhole_tokens -p)
    if test -z "$(__wormhole_tokens -t)"
        set -l index (count (__wormhole_tokens -pc))
        set tokens $tokens[..$index] \'\' $tokens[(math $index + 1)..]
    end
    command $tokens[1] $argv $tokens
end

complete -c 'wormhole' -f
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'send' -d 'Pass a message to every listener of an identifier.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'listen' -d 'Print each message passed under the identifiers, as it arrives.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'request' -d 'Send a request to the responders of an identifier and print the reply.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'respond' -d 'Answer the requests of an identifier by running a command for each.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'read' -d 'Print the latest message of an identifier.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'clear' -d 'Remove the messages of identifiers, or of all of them.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'list' -d 'List the identifiers that have messages: count, bytes and last update.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'status' -d 'Show who listens to each identifier: running listeners and durable names, with how far behind they are.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'forget' -d 'Remove the position of a durable listener, and what was kept for it.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'doctor' -d 'Check the container, the inotify limits and the listeners, and watch a test post arrive.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'share' -d 'Share an application group with the members of a Unix group (run as root).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'top' -d 'Show each identifier\'s traffic at intervals: messages and bytes per second, listeners, queue members, pending messages, how far behind.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'post' -d 'Post payload-free notifications, optionally setting a name\'s 64-bit state first.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'observe' -d 'Print a line each time one of the names is posted.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'path' -d 'Print the container directory that the options select (creating it if needed), or the PostgreSQL container.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'activation' -d 'Write a systemd path unit and service that start a command when a message is passed under an identifier.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_positional "wormhole" -eq 1' -fa 'help' -d 'Show subcommand help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" file' -l 'file' -d 'Send the bytes of this file, unchanged (\'-\' for standard input).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" identifier-file' -l 'identifier-file' -d 'Read the identifier from this file (one line; \'-\' for standard input), not from the command line, which every user can read.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" json' -l 'json' -d 'Check that the message is JSON and store it as a JSON message.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" lines' -l 'lines' -d 'Pass each line of standard input as a message of its own, in batches.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" ttl' -l 'ttl' -d 'Let the message expire after this many seconds: listeners that start or resume later, and work queues, skip it and count it.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" print-sequence' -l 'print-sequence' -d 'Print the message\'s sequence number in the identifier\'s order (with --lines: the first and last, \'A-B\').'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole send" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" identifier-file' -l 'identifier-file' -d 'Listen to the identifiers in this file too, one a line (\'-\' for standard input), not on the command line, which every user can read.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" all' -l 'all' -d 'Listen to every identifier of the container, those created later included; each line is prefixed by its identifier.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" c count' -l 'count' -s 'c' -d 'Exit after this many messages (across all identifiers).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" t timeout' -l 'timeout' -s 't' -d 'Stop listening after this many seconds; exit 2 if the messages waited for did not all arrive.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" history' -l 'history' -d 'Start from the retained history: print the messages kept from before, oldest first, then new ones (with --no-follow, then stop).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" latest' -l 'latest' -d 'Start with the latest message, when there is one, then new ones.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" durable' -l 'durable' -d 'Listen as the durable listener NAME: resume after the last message printed under that name.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" queue' -l 'queue' -d 'Join the work queue NAME of the identifiers: each message to one member of the queue.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" max-deliveries' -l 'max-deliveries' -d 'With --queue: how many times a message is handed out before it goes to the dead letters.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" dead-letters' -l 'dead-letters' -d 'With --queue: where messages the queue gave up on go (default: ID.dead-letters).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" exit-when-idle' -l 'exit-when-idle' -d 'With --durable or --queue: exit (status 0) once no message has arrived for this many seconds, after what was passed while it did not run (for a service started on demand).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" retry-delay' -l 'retry-delay' -d 'With --queue: seconds before a message that failed (not printed: its member ended) is handed out again, doubled at each further failure; 0: at once.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" max-retry-delay' -l 'max-retry-delay' -d 'With --queue: the longest wait before a message that failed is handed out again, in seconds.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" no-follow' -l 'no-follow' -d 'Stop after the messages already there (the history, the latest, or what a durable name has not printed yet) instead of following new ones.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" json' -l 'json' -d 'Print one JSON object per line: identifier, sequence, time, pid and uid (of the sender), kind and payload.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" prefix' -l 'prefix' -d 'Prefix each line with the identifier and \': \'.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" raw' -l 'raw' -d 'Write each payload exactly as it is, with no newline added (for one binary message with --count 1).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" v verbose' -l 'verbose' -s 'v' -d 'Say on standard error where it listens, once it listens (scripts can wait for that line).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole listen" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" file' -l 'file' -d 'Send the bytes of this file as the request (\'-\' for standard input).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" identifier-file' -l 'identifier-file' -d 'Read the identifier from this file (one line; \'-\' for standard input), not from the command line, which every user can read.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" t timeout' -l 'timeout' -s 't' -d 'Seconds to wait for the reply.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" json' -l 'json' -d 'Send the request as JSON (checked), and print the reply as a JSON object: identifier, sequence, time, pid, kind and payload.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole request" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" identifier-file' -l 'identifier-file' -d 'Read the identifier from this file (one line; \'-\' for standard input), not from the command line, which every user can read.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" c count' -l 'count' -s 'c' -d 'Exit after answering this many requests.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" exit-when-idle' -l 'exit-when-idle' -d 'Exit (status 0) once no request has arrived for this many seconds, after those passed while it did not run (for a responder started on demand).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" v verbose' -l 'verbose' -s 'v' -d 'Say on standard error when it serves, and each request\'s outcome.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole respond" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" json' -l 'json' -d 'Print one JSON object: identifier, sequence, time, pid and uid (of the sender), kind and payload.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" raw' -l 'raw' -d 'Write the payload exactly as it is, with no newline added.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole read" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" all' -l 'all' -d 'Clear every identifier in the container.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" y yes' -l 'yes' -s 'y' -d 'With --all, do not ask first (it asks only on a terminal, in the default group\'s container).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole clear" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" json' -l 'json' -d 'Print one JSON object per identifier and line.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" all' -l 'all' -d 'Also list the identifiers whose messages were cleared (0 messages).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole list" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" json' -l 'json' -d 'Print one JSON object per listener and line.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole status" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole forget" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole forget" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole forget" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole forget" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole forget" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole doctor" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole doctor" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole doctor" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole doctor" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole doctor" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole share" unix-group' -l 'unix-group' -d 'The Unix group whose members share it.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole share" revoke' -l 'revoke' -d 'Stop sharing: remove the shared container and its messages.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole share" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole share" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" i interval' -l 'interval' -s 'i' -d 'Seconds between two reports.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" c count' -l 'count' -s 'c' -d 'Stop after this many reports.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" json' -l 'json' -d 'One JSON object per interval and line, even on a terminal.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole top" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" state' -l 'state' -d 'Set the names\' state value (an unsigned 64-bit integer) before posting.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole post" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" c count' -l 'count' -s 'c' -d 'Exit after this many notifications.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" t timeout' -l 'timeout' -s 't' -d 'Stop observing after this many seconds; exit 2 if the notifications waited for did not all arrive.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" state' -l 'state' -d 'Print the name\'s state value after the name.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" v verbose' -l 'verbose' -s 'v' -d 'Say on standard error where it observes, once it observes (scripts can wait for that line).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole observe" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole path" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole path" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole path" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole path" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole path" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" name' -l 'name' -d 'The units\' name, without .path or .service (default: wormhole-<identifier>, escaped).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" user' -l 'user' -d 'Write units for the user\'s own systemd instance (the default).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" system' -l 'system' -d 'Write system units (run as --run-as USER, with the shared group\'s Unix group).'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" run-as' -l 'run-as' -d 'With --system: the user the service runs as (User=).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" o output' -l 'output' -s 'o' -d 'Write the units into this directory (default: ~/.config/systemd/user, or /etc/systemd/system with --system).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" print' -l 'print' -d 'Print the units on standard output instead of writing them.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" group' -l 'group' -d 'The application group whose container holds the messages (default: $WORMHOLE_GROUP, else group.wormhole.default).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" directory' -l 'directory' -d 'Use this directory as the container instead of a group\'s; created 0700 when missing (default: $WORMHOLE_DIRECTORY).' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" optional-directory' -l 'optional-directory' -d 'A sub-directory of the group\'s container, as MMWormhole\'s optionalDirectory.' -rfka ''
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" version' -l 'version' -d 'Show the version.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole activation" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'wormhole' -n '__wormhole_should_offer_completions_for_flags_or_options "wormhole help" version' -l 'version' -d 'Show the version.'
