# The audit log becomes a hash chain (issue 14 §5, D82): every row gets `seq` (gap-free), `prev_hash`
# and `row_hash` (likes_project.audit.chain), and the rows already there are chained here, in the order
# they were written (id), from the genesis value. The append-only trigger (0002) refuses UPDATE, so it is
# disabled for the chaining statements and enabled again, inside this migration's transaction: nothing
# else can change the table meanwhile (ALTER TABLE holds it exclusively until the commit). Checkpoints of
# the chain's head (append-only too) and the verifications' outcomes get tables of their own.

import django.utils.timezone
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

TABLE = "opsconsole_auditrecord"
TRIGGER = "pgtrigger_audit_append_only_ecc7d"  # as 0002 installed it
CHUNK = 1000
FIELDS = ("at", "actor", "channel", "action", "target_type", "target_id", "params", "outcome", "job_id")


def chain_existing_rows(apps, schema_editor):
    from likes_project.audit import chain

    AuditRecord = apps.get_model("audit", "AuditRecord")
    rows = AuditRecord.objects.using(schema_editor.connection.alias).order_by("id")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER {TRIGGER}")
        seq, prev_hash, last_id = 0, chain.GENESIS, 0
        while True:
            chunk = list(rows.filter(id__gt=last_id).values_list("id", *FIELDS)[:CHUNK])
            if not chunk:
                break
            ids, seqs, prevs, hashes = [], [], [], []
            for row_id, *values in chunk:
                seq += 1
                row_hash = chain.row_hash_compute(seq=seq, prev_hash=prev_hash, **dict(zip(FIELDS, values, strict=True)))
                ids.append(row_id), seqs.append(seq), prevs.append(prev_hash), hashes.append(row_hash)
                prev_hash, last_id = row_hash, row_id
            cursor.execute(f"UPDATE {TABLE} AS t SET seq = v.seq, prev_hash = v.prev_hash, row_hash = v.row_hash "
                           "FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[]) AS v(id, seq, prev_hash, "
                           "row_hash) WHERE t.id = v.id", [ids, seqs, prevs, hashes])
        cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER {TRIGGER}")


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0002_append_only'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditChainCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField()),
                ('seq', models.BigIntegerField(db_index=True)),
                ('row_hash', models.CharField(max_length=64)),
                ('signature', models.CharField(blank=True, default='', max_length=64)),
                ('key_id', models.CharField(blank=True, default='', max_length=16)),
            ],
            options={
                'ordering': ['-seq'],
            },
        ),
        migrations.CreateModel(
            name='AuditChainVerification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('actor', models.CharField(max_length=150)),
                ('channel', models.CharField(max_length=16)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('status', models.CharField(choices=[('INTACT', 'Intact'), ('BROKEN', 'Broken')], max_length=8)),
                ('since_seq', models.BigIntegerField()),
                ('head_seq', models.BigIntegerField()),
                ('checked', models.BigIntegerField()),
                ('broken_seq', models.BigIntegerField(blank=True, null=True)),
                ('problem', models.CharField(blank=True, default='', max_length=512)),
                ('checkpoint_id', models.BigIntegerField(blank=True, null=True)),
                ('checkpoint_seq', models.BigIntegerField(blank=True, null=True)),
                ('signature_checked', models.BooleanField(default=False)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('verify_auditchain', 'Can verify the audit chain')],
            },
        ),
        migrations.AddField(
            model_name='auditrecord',
            name='prev_hash',
            field=models.CharField(blank=True, db_default='', max_length=64),
        ),
        migrations.AddField(
            model_name='auditrecord',
            name='row_hash',
            field=models.CharField(blank=True, db_default='', max_length=64),
        ),
        migrations.AddField(
            model_name='auditrecord',
            name='seq',
            field=models.BigIntegerField(blank=True, null=True, unique=True),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='at',
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.RunPython(chain_existing_rows, migrations.RunPython.noop, hints={"family": "default"}),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(condition=models.Q(('seq__isnull', True)), fields=['id'], name='audit_unchained_idx'),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='auditchaincheckpoint',
            trigger=pgtrigger.compiler.Trigger(name='audit_checkpoint_append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='ea113e1f7bc90a58fcab204d6227c2954b46bc04', operation='UPDATE OR DELETE', pgid='pgtrigger_audit_checkpoint_append_only_0e907', table='audit_auditchaincheckpoint', when='BEFORE')),
        ),
    ]
