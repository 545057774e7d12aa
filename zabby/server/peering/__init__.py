"""Links between servers: zabby's peer protocol and ZooKeeper 3.8's, peer authentication, the slots of links not yet
identified, and the bound on what peers queue in the engine."""
