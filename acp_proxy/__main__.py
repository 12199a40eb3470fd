from acp_proxy.relay.launch import main

main()
