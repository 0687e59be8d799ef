// SPDX-License-Identifier: Apache-2.0
/*
 * Grant ACLs on a SASL/PLAIN broker of the test harness: allow one principal
 * some operations on some topics, or transactional ids written
 * "transactional-id:NAME" (literal names, any host; Kafka topic names hold no
 * colon), logged in as a super user. Run by SaslKafkaBroker.grant() (tests/harness/kafka.py) with
 * java's source-file mode and the broker's own jars on the class path:
 *
 *   java -cp '<kafka libs>/*' KafkaAcls.java BOOTSTRAP ADMIN_USER ADMIN_PASSWORD \
 *        PRINCIPAL OPERATION[,OPERATION...] RESOURCE...
 *
 * e.g. ... 127.0.0.1:9092 admin secret User:relay WRITE,DESCRIBE orders.created
 * Exits 0 once the controller accepted every binding; else prints why and
 * exits 1. Knows nothing of PostgreSQL or the relay.
 */
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcls {
        private static final String TXN = "transactional-id:";

        public static void main(String[] args) throws Exception {
                if (args.length < 6) {
                        System.err.println("usage: KafkaAcls BOOTSTRAP ADMIN_USER ADMIN_PASSWORD "
                                           + "PRINCIPAL OPERATION[,OPERATION...] RESOURCE...");
                        System.exit(2);
                }
                Properties p = new Properties();
                p.put("bootstrap.servers", args[0]);
                p.put("security.protocol", "SASL_PLAINTEXT");
                p.put("sasl.mechanism", "PLAIN");
                p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule "
                      + "required username=\"" + args[1] + "\" password=\"" + args[2] + "\";");
                List<AclBinding> acls = new ArrayList<>();
                for (String op : args[4].split(",")) {
                        AclOperation operation = AclOperation.fromString(op);
                        if (operation == AclOperation.UNKNOWN) {
                                System.err.println("unknown ACL operation " + op);
                                System.exit(2);
                        }
                        for (int i = 5; i < args.length; i++)
                                acls.add(new AclBinding(
                                        args[i].startsWith(TXN)
                                        ? new ResourcePattern(ResourceType.TRANSACTIONAL_ID,
                                                              args[i].substring(TXN.length()),
                                                              PatternType.LITERAL)
                                        : new ResourcePattern(ResourceType.TOPIC, args[i],
                                                              PatternType.LITERAL),
                                        new AccessControlEntry(args[3], "*", operation,
                                                               AclPermissionType.ALLOW)));
                }
                try (Admin admin = Admin.create(p)) {
                        admin.createAcls(acls).all().get(60, TimeUnit.SECONDS);
                } catch (Exception e) {
                        System.err.println("creating ACLs " + acls + " failed: " + e);
                        System.exit(1);
                }
        }
}
